"""The NLP experiment: whole programs with control flow, compiled ahead of time, against peers.

The Relay paper (Roesch et al., 2019, "NLP") ran CharRNN and TreeLSTM through Relay's
ahead-of-time compiler and reported them 1.4x and 2x faster than PyTorch. This file measures the
zoo's recurrent models at batch 1, float32:

* ``rnn``, ``gru``, ``lstm``: one layer, input and hidden size 256 (``hidden``), 35 steps, the
  loop form (a recursion over a prelude ``List`` of the steps' inputs);
* ``char_rnn``: the name generator, 20 steps of sampling (``hidden`` 128);
* ``tree_lstm``: the Child-Sum TreeLSTM over a 31-node tree (a full binary tree of depth 5),
  input and hidden 128, and over random trees of 31 nodes (a new shape per call).

Engines: relaybench AoT (``rb.build(..., executor="aot")``), the relaybench VM, the reference
interpreter (fewer repetitions: a run takes long), PyTorch eager (the same cells, ``torch.nn``
modules with the same weights, the loop in Python; TreeLSTM's module takes the tree in
post-order, inputs and child counts, and keeps the states on a stack), TorchScript
(``torch.jit.script`` of the eager module, its loops kept; one module class per cell kind, since
TorchScript compiles a class once) and ONNX Runtime (the eager module exported by tracing:
the loop over the steps and the recursion over the tree are *unrolled* at export, so the ONNX
graph only fits the one sequence length or tree shape it was exported with; a new tree is a new
export and session, whose cost the random-tree row reports). CharRNN's sampling stops on the
end character, a data-dependent exit ONNX's tracer cannot express: ORT runs the unrolled
20 steps without it (the same work when no end character comes up, as with these weights).
Outputs are compared with the interpreter's before anything is timed.

Timing: every engine is warmed up; rounds interleave the engines (round ``r`` starts from
engine ``r mod n``); each round times ``number`` calls; the median round is reported in ms,
and each engine's speed relative to ONNX Runtime (ORT's ms over the engine's: above 1 is
faster). PyTorch and ORT use ``threads`` threads, as relaybench's kernels (``RB_NUM_THREADS``).

Isolation: with more than one thread, each engine is timed in a process of its own (the
default when ``threads > 1``; ``isolate=False`` or ``bench/nlp.py --no-isolate`` keeps them all
in one process). ONNX Runtime's intra-op workers and relaybench's pool both spin between runs,
so in one process each engine runs beside the other's busy threads and loses the second core
to them: the AoT LSTM measured 0.60-0.74 ms alone and 1.1-1.6 ms beside an ORT session, which
says more about the two pools than about either engine. Isolated, a fresh ``python`` per
(model, engine, launch) builds that one engine, checks its value against the reference value
(computed first, in a process of its own, by the interpreter, or AoT when the interpreter is
left out) and times its share of the rounds; the launches alternate the engines, ``children``
launches per engine and model (round ``r`` goes to launch ``r mod children``), and the median
is taken over all of an engine's rounds. ORT keeps its default session options (spinning on).
The table's first line and notes, and the JSON's ``mode``, say which way a result was taken.

:func:`nlp` returns an :class:`NlpResult` (``.table()``, ``.to_markdown()``, ``.write(dir)``);
``relaybench reproduce nlp --out DIR`` and ``bench/nlp.py`` run it.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .._table import Table

__all__ = ["nlp", "NlpResult", "MODELS", "PAPER", "ENGINES", "make_inputs", "full_tree",
           "random_tree"]

MODELS = ("rnn", "gru", "lstm", "char_rnn", "tree_lstm", "tree_lstm_random")
ENGINES = ("aot", "vm", "interpreter", "torch", "torchscript", "onnxruntime")
#: the engines measured unless asked otherwise: all of them
DEFAULT_ENGINES = ENGINES

#: the paper's speedups of Relay AoT over PyTorch (Roesch et al., 2019, NLP results)
PAPER = {"char_rnn": 1.4, "tree_lstm": 2.0}

#: model -> (zoo keywords, what the row measures)
CONFIGS = {
    "rnn": (dict(form="loop", batch_size=1, seq_len=35, input_size=256, hidden_size=256),
            "RNN 256, 35 steps"),
    "gru": (dict(form="loop", batch_size=1, seq_len=35, input_size=256, hidden_size=256),
            "GRU 256, 35 steps"),
    "lstm": (dict(form="loop", batch_size=1, seq_len=35, input_size=256, hidden_size=256),
             "LSTM 256, 35 steps"),
    "char_rnn": (dict(max_length=20, hidden_size=128), "CharRNN, 20 steps"),
    "tree_lstm": (dict(input_size=128, hidden_size=128), "TreeLSTM, 31 nodes"),
    "tree_lstm_random": (dict(input_size=128, hidden_size=128), "TreeLSTM, random 31-node trees"),
}


def full_tree(depth: int, make_x):
    """A full binary tree of ``depth`` levels as ``(x, [children])`` (2**depth - 1 nodes)."""
    levels = [[(make_x(), []) for _ in range(2 ** (depth - 1))]]
    for d in range(depth - 2, -1, -1):
        below = levels[-1]
        levels.append([(make_x(), [below[2 * k], below[2 * k + 1]]) for k in range(2 ** d)])
    return levels[-1][0]


def random_tree(nodes: int, make_x, rng):
    """A tree of ``nodes`` nodes, each node's parent drawn among the earlier ones."""
    children = [[] for _ in range(nodes)]
    for k in range(1, nodes):
        children[int(rng.integers(0, k))].append(k)
    built = {}
    for k in range(nodes - 1, -1, -1):
        built[k] = (make_x(), [built[c] for c in children[k]])
    return built[0]


def make_inputs(model: str, sizes: dict, seed: int = 0):
    """The Python inputs of ``model``: step arrays, (category, start), or a tree."""
    rng = np.random.default_rng(seed)
    if model in ("rnn", "gru", "lstm"):
        return [rng.standard_normal((1, sizes["input_size"])).astype("float32")
                for _ in range(sizes["seq_len"])]
    if model == "char_rnn":
        category = np.zeros((1, 18), "float32")
        category[0, 3] = 1
        return category, np.int32(5)
    return full_tree(5, lambda: rng.standard_normal((1, sizes["input_size"])).astype("float32"))


# ---- the peers --------------------------------------------------------------------------------

def _torch_module(model: str, params: dict, sizes: dict):
    import torch
    from torch import nn

    def tensor(name):
        return torch.from_numpy(np.ascontiguousarray(params[name]))

    if model in ("rnn", "gru", "lstm"):
        hs, ins = sizes["hidden_size"], sizes["input_size"]
        cell = {"rnn": nn.RNNCell, "gru": nn.GRUCell, "lstm": nn.LSTMCell}[model](ins, hs)
        with torch.no_grad():
            for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(cell, n).copy_(tensor(n))
        return {"rnn": _RNNLoop, "gru": _GRULoop, "lstm": _LSTM}[model](cell, hs)
    if model == "char_rnn":
        return _CharRNN({k: tensor(k) for k in params}, sizes["max_length"])
    return _TreeLSTM({k: tensor(k) for k in params})


def _define_torch_classes():
    import torch
    from torch import nn

    global _Recurrent, _RNNLoop, _GRULoop, _LSTM, _CharRNN, _TreeLSTM

    class _Recurrent(nn.Module):
        def __init__(self, cell, hidden: int):
            super().__init__()
            self.cell, self.hidden = cell, hidden

        def forward(self, xs: torch.Tensor):
            h = torch.zeros(1, self.hidden)
            for k in range(xs.shape[0]):
                h = self.cell(xs[k], h)
            return h

    # one class per cell kind: TorchScript compiles a class once, for the submodule types of
    # the first instance it scripts (a second instance with another cell crashed it)
    class _RNNLoop(_Recurrent):
        pass

    class _GRULoop(_Recurrent):
        pass

    class _LSTM(nn.Module):
        def __init__(self, cell, hidden: int):
            super().__init__()
            self.cell, self.hidden = cell, hidden

        def forward(self, xs: torch.Tensor):
            h = torch.zeros(1, self.hidden)
            c = torch.zeros(1, self.hidden)
            for k in range(xs.shape[0]):
                h, c = self.cell(xs[k], (h, c))
            return h, c

    class _CharRNN(nn.Module):
        def __init__(self, w: dict, max_length: int):
            super().__init__()
            for k, v in w.items():
                self.register_buffer(k, v)
            self.max_length = max_length
            self.n_letters = int(w["i2o_weight"].shape[0])
            self.hidden = int(w["i2h_weight"].shape[0])

        def forward(self, category: torch.Tensor, start: int, stop_early: bool = True):
            hidden = torch.zeros(1, self.hidden)
            char = start
            out: list[int] = []
            for _ in range(self.max_length):
                letter = torch.zeros(1, self.n_letters)
                letter[0, char] = 1.0
                combined = torch.cat([category, letter, hidden], 1)
                hidden = torch.addmm(self.i2h_bias, combined, self.i2h_weight.t())
                output = torch.addmm(self.i2o_bias, combined, self.i2o_weight.t())
                logits = torch.addmm(self.o2o_bias, torch.cat([hidden, output], 1),
                                     self.o2o_weight.t())
                char = int(torch.argmax(torch.log_softmax(logits, 1), 1)[0])
                if stop_early and char == self.n_letters - 1:
                    break
                out.append(char)
            return out

    class _TreeLSTM(nn.Module):
        def __init__(self, w: dict):
            super().__init__()
            for k, v in w.items():
                self.register_buffer(k, v)
            self.hidden = int(w["fh_weight"].shape[0])

        def node(self, x, hs: list[torch.Tensor], cs: list[torch.Tensor]):
            h_sum = torch.zeros(1, self.hidden)
            c_sum = torch.zeros(1, self.hidden)
            fx = torch.addmm(self.fx_bias, x, self.fx_weight.t())
            for h in hs:
                h_sum = h_sum + h
            for k in range(len(hs)):
                f = torch.sigmoid(fx + torch.addmm(self.fh_bias, hs[k], self.fh_weight.t()))
                c_sum = c_sum + f * cs[k]
            iou = torch.addmm(self.ioux_bias, x, self.ioux_weight.t()) + \
                torch.addmm(self.iouh_bias, h_sum, self.iouh_weight.t())
            i, o, u = torch.chunk(iou, 3, 1)
            c = torch.sigmoid(i) * torch.tanh(u) + c_sum
            return torch.sigmoid(o) * torch.tanh(c), c

        def forward(self, xs: torch.Tensor, counts: list[int]):
            """The tree in post-order: node ``k`` has input ``xs[k]`` and ``counts[k]``
            children, the nodes just before it whose states are on top of the stack."""
            hs: list[torch.Tensor] = []
            cs: list[torch.Tensor] = []
            for k in range(len(counts)):
                n = counts[k]
                h, c = self.node(xs[k], hs[len(hs) - n:], cs[len(cs) - n:])
                hs = hs[:len(hs) - n]
                cs = cs[:len(cs) - n]
                hs.append(h)
                cs.append(c)
            return hs[0], cs[0]

    return _RNNLoop, _GRULoop, _LSTM, _CharRNN, _TreeLSTM


_Recurrent = _RNNLoop = _GRULoop = _LSTM = _CharRNN = _TreeLSTM = None


def _torch_tree(tree):
    """The tree ``(x, [children])`` in post-order, as the torch module takes it: the stacked
    inputs and each node's child count."""
    import torch
    xs, counts = [], []
    stack = [(tree, False)]
    while stack:
        t, ready = stack.pop()
        if ready:
            xs.append(t[0])
            counts.append(len(t[1]))
            continue
        stack.append((t, True))
        stack.extend((c, False) for c in reversed(t[1]))
    return torch.from_numpy(np.stack(xs)), counts


class _Tracing:
    """The eager module on one fixed input, as a function of tensors only (for the tracer)."""

    @staticmethod
    def wrap(model, net, example):
        import torch
        if model in ("rnn", "gru", "lstm"):
            return net, (torch.from_numpy(np.stack(example)),)
        if model == "char_rnn":
            category, start = example

            class Sampler(torch.nn.Module):
                def forward(self, category):
                    return _char_rnn_traced(net, category, int(start))
            return Sampler(), (torch.from_numpy(category),)
        xs, counts = _torch_tree(example)

        class Tree(torch.nn.Module):
            def forward(self, xs):
                return net(xs, counts)
        return Tree(), (xs,)


def _char_rnn_traced(net, category, start: int):
    """The 20 steps without the data-dependent exit; the chosen characters as a tensor."""
    import torch
    hidden = torch.zeros(1, net.hidden)
    letter = torch.zeros(1, net.n_letters)
    letter[0, start] = 1.0
    chosen = []
    for _ in range(net.max_length):
        combined = torch.cat([category, letter, hidden], 1)
        hidden = torch.addmm(net.i2h_bias, combined, net.i2h_weight.t())
        output = torch.addmm(net.i2o_bias, combined, net.i2o_weight.t())
        logits = torch.addmm(net.o2o_bias, torch.cat([hidden, output], 1), net.o2o_weight.t())
        char = torch.argmax(torch.log_softmax(logits, 1), 1)
        letter = torch.nn.functional.one_hot(char, net.n_letters).to(torch.float32)
        chosen.append(char)
    return torch.cat(chosen)


def _ort_session(module, args, threads: int):
    import io
    import warnings

    import onnxruntime as ort
    import torch
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buffer, dynamo=False, opset_version=17)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(buffer.getvalue(), options,
                                   providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    feed = {name: args[0].numpy()}
    return lambda: session.run(None, feed)


# ---- the measurement -------------------------------------------------------------------------

def _engines(model: str, threads: int, engines: Sequence[str], notes: list):
    """name -> (function of no arguments, check value or None) for ``model``."""
    import relaybench as rb
    from ..adt import from_python
    zoo = "tree_lstm" if model == "tree_lstm_random" else model
    sizes, _ = CONFIGS[model]
    mod, params = rb.models.get(zoo, **sizes)
    example = make_inputs(zoo, sizes)
    if zoo in ("rnn", "gru", "lstm"):
        relay_args = (from_python(list(example)),)
    elif zoo == "char_rnn":
        relay_args = example
    else:
        relay_args = (from_python(example, "Tree"),)
    out: dict = {}
    rng = np.random.default_rng(7)
    trees = None
    if model == "tree_lstm_random":
        trees = [random_tree(31, lambda: rng.standard_normal((1, sizes["input_size"]))
                             .astype("float32"), rng) for _ in range(8)]
        relay_trees = [(from_python(t, "Tree"),) for t in trees]
    counter = iter(range(1 << 62))

    def relay_call(run, args):
        if trees is None:
            return lambda: run(*args)
        return lambda: run(*relay_trees[next(counter) % len(relay_trees)])

    torch_engines = [e for e in engines if e in ("torch", "torchscript", "onnxruntime")]
    try:
        import torch
    except ImportError:
        if torch_engines:
            notes.append("PyTorch is not installed: no torch, torchscript or onnxruntime rows")
            torch_engines = []
    if torch_engines:
        torch.set_num_threads(threads)
        if _Recurrent is None:
            _define_torch_classes()
        net = _torch_module(zoo, params, dict(sizes, **({"max_length": 20}
                                                       if zoo == "char_rnn" else {})))
        if zoo in ("rnn", "gru", "lstm"):
            torch_args = (torch.from_numpy(np.stack(example)),)
        elif zoo == "char_rnn":
            torch_args = (torch.from_numpy(example[0]), int(example[1]))
        else:
            torch_args = _torch_tree(example)
        torch_trees = [_torch_tree(t) for t in trees] if trees is not None else None

        def torch_call(f):
            if torch_trees is None:
                return lambda: f(*torch_args)
            return lambda: f(*torch_trees[next(counter) % len(torch_trees)])

        if "torch" in engines:
            out["torch"] = _no_grad(torch_call(net))
        if "torchscript" in engines:
            try:
                # TorchScript's fuser compiles with an LLVM of its own, next to llvmlite's in
                # this process; the interpreter of TorchScript graphs is what is measured
                torch._C._jit_set_texpr_fuser_enabled(False)
                scripted = torch.jit.script(net)
                out["torchscript"] = _no_grad(torch_call(scripted))
            except Exception as err:   # noqa: BLE001 - a peer that cannot script is reported
                notes.append(f"TorchScript could not script {model}: {type(err).__name__}")
        if "onnxruntime" in engines:
            try:
                import onnxruntime  # noqa: F401
                module, args = _Tracing.wrap(zoo, net, example)
                if trees is None:
                    out["onnxruntime"] = _ort_session(module, args, threads)
                    if zoo == "char_rnn":
                        notes.append("char_rnn, onnxruntime: the 20 steps unrolled at export, "
                                     "without the stop on the end character")
                    else:
                        notes.append(f"{model}, onnxruntime: the "
                                     f"{'step loop' if zoo != 'tree_lstm' else 'tree'} is "
                                     "unrolled at export (one ONNX graph per shape)")
                else:
                    def export_and_run(k=[0]):
                        t = trees[k[0] % len(trees)]
                        k[0] += 1
                        m, a = _Tracing.wrap(zoo, net, t)
                        return _ort_session(m, a, threads)()
                    out["onnxruntime"] = export_and_run
                    notes.append("tree_lstm_random, onnxruntime: every call exports the new "
                                 "tree to ONNX and opens a session (the tree is unrolled)")
            except ImportError:
                notes.append("onnxruntime is not installed: no onnxruntime rows")
    # relaybench's engines
    if "aot" in engines:
        lib = rb.build(mod, target="llvm", params=params, executor="aot")
        out["aot"] = relay_call(lib.run, relay_args)
    if "vm" in engines:
        vm = rb.vm.VirtualMachine(rb.vm.compile(mod, params=params), num_threads=threads)
        out["vm"] = relay_call(vm.run, relay_args)
    if "interpreter" in engines:
        from ..passes.bind_params import bind_params
        ex = rb.create_executor("interpreter", mod=bind_params(mod, params))
        fn = ex.evaluate()
        out["interpreter"] = relay_call(fn, relay_args)
    return out, example, relay_args, mod, params


def _no_grad(f):
    import torch

    def call():
        with torch.no_grad():
            return f()
    return call


def _reference(model: str, calls: dict):
    """``(name, value)``: the engine whose value the others are checked against (the
    interpreter, else AoT) and that value as Python data; ``(None, None)`` when there is none
    (the random trees change every call, so they have none)."""
    from ..adt import to_python
    if model == "tree_lstm_random":
        return None, None
    ref_name = "interpreter" if "interpreter" in calls else "aot"
    if ref_name not in calls:
        return None, None
    return ref_name, to_python(calls[ref_name]())


def _same(model: str, name: str, got, want) -> bool:
    """Whether engine ``name``'s raw value ``got`` matches the reference value ``want``."""
    from ..adt import to_python
    if model == "char_rnn":
        g = [int(v) for v in (to_python(got) if name in ("aot", "vm", "interpreter") else
                              (got[0] if name == "onnxruntime" else got))]
        w = [int(v) for v in want]
        return g[:len(w)] == w
    g = to_python(got) if name in ("aot", "vm", "interpreter") else got
    if name == "onnxruntime":
        g = tuple(g)
    g = [np.asarray(v) for v in (g if isinstance(g, (tuple, list)) else (g,))]
    w = [np.asarray(v) for v in (want if isinstance(want, tuple) else (want,))]
    return all(np.allclose(a.reshape(-1), b.reshape(-1), rtol=1e-3, atol=1e-4)
               for a, b in zip(g, w))


def _check(model: str, calls: dict, notes: list, reference=None) -> None:
    """Every engine's value against the interpreter's (or AoT's when it is left out), or
    against ``reference``, a ``(name, value)`` pair computed elsewhere."""
    ref_name, want = reference if reference is not None else _reference(model, calls)
    if ref_name is None:
        return
    for name, call in calls.items():
        if name == ref_name and reference is None:
            continue
        if not _same(model, name, call(), want):
            notes.append(f"{model}: {name} differs from the {ref_name}")
            raise AssertionError(f"{model}: {name} differs from the {ref_name}")


def _time(calls: dict, repeat: int, number: int, slow: dict, keep: Optional[dict] = None) -> dict:
    """Each engine's median ms per call over ``repeat`` interleaved rounds of ``number`` calls
    (``slow``: engine -> calls per round, those engines timed in the first two rounds only).
    ``keep``, when given, receives each engine's round times."""
    names = list(calls)
    rounds: dict = {n: [] for n in names}
    for name in names:
        calls[name]()   # warm up
    for r in range(repeat):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            reps = slow.get(name, number)
            if reps == 0 or (name in slow and r >= 2):
                continue
            start = time.perf_counter()
            for _ in range(reps):
                calls[name]()
            rounds[name].append((time.perf_counter() - start) * 1e3 / reps)
            time.sleep(0.02)
    if keep is not None:
        keep.update({n: v for n, v in rounds.items() if v})
    return {n: float(np.median(v)) for n, v in rounds.items() if v}


# ---- one engine per process -----------------------------------------------------------------

def _child(spec_path: str) -> int:
    """The body of an isolated process: build one engine of one model, then either compute the
    reference value (``task`` "reference", pickled to ``value``) or check the engine against
    the pickled reference and time the spec's rounds. Writes ``{"ms": [...], "notes": [...]}``
    (or ``{"error": ...}`` when the value differs) as JSON to the spec's ``out``."""
    spec = json.loads(Path(spec_path).read_text())
    model, engine = spec["model"], spec["engine"]
    CONFIGS[model] = (spec["config"], CONFIGS[model][1])
    notes: list = []
    result: dict = {"ms": [], "notes": notes}
    calls, *_ = _engines(model, spec["threads"], [engine], notes)
    if engine in calls:
        call = calls[engine]
        if spec["task"] == "reference":
            name, want = _reference(model, calls)
            Path(spec["value"]).write_bytes(pickle.dumps((name, want)))
        else:
            if spec.get("reference"):
                reference = pickle.loads(Path(spec["reference"]).read_bytes())
                try:
                    _check(model, calls, notes, reference)
                except AssertionError as err:
                    result["error"] = str(err)
            if "error" not in result:
                call()   # warm up
                for _ in spec["rounds"]:
                    start = time.perf_counter()
                    for _ in range(spec["number"]):
                        call()
                    result["ms"].append((time.perf_counter() - start) * 1e3 / spec["number"])
                    time.sleep(0.02)
    Path(spec["out"]).write_text(json.dumps(result))
    return 0


def _launch(spec: dict, workdir: Path, env: dict) -> dict:
    """Run :func:`_child` on ``spec`` in a fresh ``python``; its JSON result."""
    tag = f"{spec['model']}-{spec['engine']}-{spec['task']}-{spec.get('launch', 0)}"
    spec = dict(spec, out=str(workdir / f"{tag}.json"))
    spec_path = workdir / f"{tag}.spec.json"
    spec_path.write_text(json.dumps(spec))
    code = ("import sys; from relaybench.experiments.nlp import _child; "
            "sys.exit(_child(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-c", code, str(spec_path)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0 or not Path(spec["out"]).exists():
        tail = "\n".join((done.stderr or "").strip().splitlines()[-15:])
        raise RuntimeError(f"nlp: the process timing {spec['model']} on {spec['engine']} "
                           f"failed (exit {done.returncode}):\n{tail}")
    return json.loads(Path(spec["out"]).read_text())


def _child_env(threads: int) -> dict:
    """The parent's environment, with its scoped knob overrides and ``RB_NUM_THREADS`` set, and
    the package importable."""
    from .. import config
    env = dict(os.environ)
    for name, value in config._overrides.get().items():
        env[name] = str(value)
    env["RB_NUM_THREADS"] = str(threads)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "")
                                                  .split(os.pathsep) if p])
    return env


def _time_isolated(model: str, threads: int, engines: Sequence[str], repeat: int, number: int,
                   slow: dict, children: int, notes: list, keep: dict) -> dict:
    """:func:`_time`'s medians, each engine timed in processes of its own: a reference process
    first, then ``children`` launches per engine, the engines alternating."""
    config = dict(CONFIGS[model][0])
    engines = [e for e in ENGINES if e in engines]
    if model == "tree_lstm_random" and "onnxruntime" in engines:
        slow = dict(slow, onnxruntime=1)
    env = _child_env(threads)
    base = {"model": model, "threads": threads, "config": config}
    launches = max(1, min(children, repeat))
    rounds: dict = {e: [] for e in engines}
    with tempfile.TemporaryDirectory(prefix="rb-nlp-") as tmp:
        workdir = Path(tmp)
        reference = None
        ref_name = "interpreter" if "interpreter" in engines else "aot"
        if model != "tree_lstm_random" and ref_name in engines:
            value = workdir / f"{model}-reference.pkl"
            got = _launch(dict(base, engine=ref_name, task="reference", value=str(value)),
                          workdir, env)
            _merge(notes, got["notes"])
            if value.exists():
                reference = str(value)
        gone: set = set()
        for c in range(launches):
            for k in range(len(engines)):
                engine = engines[(c + k) % len(engines)]
                reps = slow.get(engine, number)
                mine = [r for r in range(c, repeat, launches)
                        if not (engine in slow and r >= 2)]
                if engine in gone or reps == 0 or not mine:
                    continue
                got = _launch(dict(base, engine=engine, task="time", launch=c, rounds=mine,
                                   number=reps, reference=reference), workdir, env)
                _merge(notes, got["notes"])
                if "error" in got:
                    _merge(notes, [got["error"]])
                    raise AssertionError(got["error"])
                if not got["ms"]:
                    gone.add(engine)    # not installed: no row, and no further launches
                rounds[engine] += got["ms"]
    keep.update({e: v for e, v in rounds.items() if v})
    return {e: float(np.median(v)) for e, v in rounds.items() if v}


def _merge(notes: list, more: list) -> None:
    for n in more:
        if n not in notes:
            notes.append(n)


class NlpResult:
    """The table of :func:`nlp`: per model, each engine's median ms, and the ratios.
    ``mode`` is "isolated" (each engine timed in processes of its own) or "in-process" (all
    engines in one process); ``rounds`` holds each model's and engine's round times in ms."""

    def __init__(self, times: dict, threads: int, notes: list, machine: str = "",
                 mode: str = "in-process", rounds: Optional[dict] = None):
        self.times, self.threads, self.notes, self.machine = times, threads, notes, machine
        self.mode, self.rounds = mode, rounds or {}

    def rows(self) -> list:
        engines = [e for e in ENGINES if any(e in t for t in self.times.values())]
        rows = []
        for model, t in self.times.items():
            row = {"model": CONFIGS[model][1]}
            for e in engines:
                row[f"{e} ms"] = f"{t[e]:.3f}" if e in t else "-"
            row["AoT vs ORT"] = (f"{t['onnxruntime'] / t['aot']:.2f}x"
                                 if "onnxruntime" in t and "aot" in t else "-")
            row["AoT vs PyTorch"] = (f"{t['torch'] / t['aot']:.2f}x"
                                     if "torch" in t and "aot" in t else "-")
            paper = PAPER.get(model)
            row["paper: Relay AoT vs PyTorch"] = f"{paper}x" if paper else "-"
            rows.append(row)
        return rows

    def table(self) -> Table:
        """Per model: each engine's median ms, AoT's speed over ORT's and PyTorch's (above 1:
        AoT is faster) and the paper's figure."""
        return Table(self.rows())

    def to_markdown(self) -> str:
        rows = self.rows()
        if not rows:
            return "(empty)"
        cols = list(rows[0])
        lines = [f"NLP models, batch 1, {self.threads} threads, median ms, {self.mode} "
                 f"({self.machine})", "",
                 "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
        lines += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines)

    def plot(self, path=None):
        """A bar chart of each model's median ms per engine (log scale); saved to ``path`` when
        given. Needs matplotlib."""
        import matplotlib
        if path is not None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        engines = [e for e in ENGINES if any(e in t for t in self.times.values())]
        models = list(self.times)
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(models)), 3.5))
        width = 0.8 / max(len(engines), 1)
        for k, engine in enumerate(engines):
            xs = [m + k * width for m in range(len(models))]
            ys = [self.times[m].get(engine, float("nan")) for m in models]
            ax.bar(xs, ys, width, label=engine)
        ax.set_yscale("log")
        ax.set_ylabel("ms per run (median)")
        ax.set_xticks([m + 0.4 - width / 2 for m in range(len(models))])
        ax.set_xticklabels([CONFIGS[m][1] for m in models], rotation=15, fontsize=8)
        ax.legend(fontsize=7, ncol=3)
        ax.set_title(f"NLP models, batch 1, {self.threads} threads, {self.mode}")
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=120)
            plt.close(fig)
        return fig

    def write(self, directory) -> list:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        md = out / "nlp.md"
        md.write_text(self.to_markdown() + "\n")
        js = out / "nlp.json"
        js.write_text(json.dumps({"threads": self.threads, "mode": self.mode,
                                  "times_ms": self.times, "rounds_ms": self.rounds,
                                  "notes": self.notes, "paper": PAPER,
                                  "machine": self.machine}, indent=1))
        return [md, js]

    def __repr__(self) -> str:
        return str(self.table()) + "".join(f"\n- {n}" for n in self.notes)

    def _repr_html_(self) -> str:
        import html
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        return self.table()._repr_html_() + (f"<ul>{notes}</ul>" if notes else "")


def nlp(models: Sequence[str] = MODELS, threads: int = 2, repeat: int = 7, number: int = 20,
        engines: Sequence[str] = DEFAULT_ENGINES, interpreter_number: int = 1,
        sizes: Optional[dict] = None, isolate: Optional[bool] = None,
        children: int = 3) -> NlpResult:
    """Measure ``models`` on ``engines`` with ``threads`` threads (see the module's text).
    ``sizes`` overrides the models' keyword arguments (small sizes for a notebook).
    ``isolate`` times each engine in processes of its own, ``children`` launches per engine
    and model sharing the ``repeat`` rounds; by default it is on when ``threads > 1``, where
    the engines' spinning thread pools would otherwise slow each other.

    >>> r = nlp(["rnn"], engines=["aot"], repeat=1, number=1, isolate=True,
    ...         sizes={"rnn": dict(seq_len=2, input_size=4, hidden_size=4)})  # doctest: +SKIP
    >>> r.mode, sorted(r.times["rnn"])                                        # doctest: +SKIP
    ('isolated', ['aot'])
    """
    from .. import config
    if isolate is None:
        isolate = threads > 1
    notes: list = []
    times: dict = {}
    rounds: dict = {}
    for model in models:
        if model not in CONFIGS:
            raise ValueError(f"nlp: unknown model {model!r}; known: {', '.join(CONFIGS)}")
    if isolate:
        launches = max(1, min(children, repeat))
        notes.append(f"isolated: each engine timed in processes of its own ({launches} per "
                     "engine and model, the engines alternating), checked against a reference "
                     "value computed in another process; no other engine's threads run beside "
                     "it")
    elif threads > 1:
        notes.append("in-process: all engines in one process, interleaved; ONNX Runtime's and "
                     "relaybench's thread pools spin side by side and slow each other")
    saved = dict(CONFIGS)
    try:
        if sizes:
            for model, extra in sizes.items():
                CONFIGS[model] = (dict(CONFIGS[model][0], **extra), CONFIGS[model][1])
        with config.Context(RB_NUM_THREADS=threads):
            for model in models:
                slow = {"interpreter": interpreter_number}
                keep: dict = {}
                if isolate:
                    times[model] = _time_isolated(model, threads, engines, repeat, number,
                                                  slow, children, notes, keep)
                else:
                    calls, *_ = _engines(model, threads, engines, notes)
                    _check(model, calls, notes)
                    if model == "tree_lstm_random" and "onnxruntime" in calls:
                        slow["onnxruntime"] = 1
                    times[model] = _time(calls, repeat, number, slow, keep)
                rounds[model] = keep
    finally:
        CONFIGS.clear()
        CONFIGS.update(saved)
    import platform
    return NlpResult(times, threads, notes, platform.processor() or platform.machine(),
                     "isolated" if isolate else "in-process", rounds)
