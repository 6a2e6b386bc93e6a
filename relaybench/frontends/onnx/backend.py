"""relaybench as an ONNX backend (``onnx.backend.base.Backend``), and a runner of the ONNX
backend node tests that judges relaybench and ONNX Runtime alike.

``RelaybenchBackend.prepare(model, device="CPU", target="interpreter")`` imports the model and
returns a rep whose ``run(inputs)`` gives the outputs; ``target="llvm"`` builds it with
``rb.build`` instead (the graph executor); ``loops=`` is passed to the importer. An op that
needs an input's *value* at import time (Reshape's shape, Slice's starts given as graph
inputs, as many node tests do) is served by binding that input to the value given to ``run``
and importing again, once per distinct value: relaybench's shape ops are static, so the model
is specialized to it, as a JIT would. For a compiled target the inputs that bound a Loop's
trip count or condition are bound too, so that the loop is unrolled (the graph executor runs
no recursive function).

The node tests ship with ``onnx`` (``onnx/backend/test/data/node``: a model and input/output
protobufs per case). :func:`node_cases` lists them with a category (``float``, ``integer``,
``boolean`` or ``other`` for strings, sequences, optionals, float8/4-bit types ...) and
:func:`run_case` runs one against a backend's ``prepare``, comparing as ONNX's runner does
(``rtol``/``atol`` of the case, dtypes and shapes exact), and returns ``(status, reason)``:
``pass``, ``fail`` (ran, wrong result) or ``error`` (could not import or run), with a short
reason.
"""

from __future__ import annotations

import glob
import os
from typing import Optional

import numpy as np

from ...errors import RelayError
from .importer import GraphImporter, NeedsStaticValue, OnnxImportError, UnsupportedOps, load_model

try:
    from onnx.backend.base import Backend, BackendRep
except ImportError:  # pragma: no cover - the module is imported only where onnx is installed
    Backend, BackendRep = object, object


class RelaybenchRep(BackendRep):
    """A prepared model: imports (and specializes) on first run, then runs on ``target``."""

    def __init__(self, model, target: str = "interpreter", opt_level: int = 3,
                 loops: str = "unroll"):
        self.model = model
        self.loops = loops
        self.target = target
        self.opt_level = opt_level
        self.input_names = [vi.name for vi in model.graph.input
                            if vi.name not in {t.name for t in model.graph.initializer}]
        self._compiled: dict = {}
        self._static_names: set = set()
        self.mod = None
        # fail early on unsupported ops, as a backend's prepare should
        GraphImporter(model).check_supported()

    def _module(self, feeds: dict):
        """The module for these inputs: the inputs it must know at import time are bound."""
        while True:
            key = tuple((n, feeds[n].dtype.str, feeds[n].shape, feeds[n].tobytes())
                        for n in sorted(self._static_names))
            if key in self._compiled:
                return self._compiled[key]
            static = {n: feeds[n] for n in self._static_names}
            importer = GraphImporter(self.model, static_inputs=static, loops=self.loops)
            try:
                mod, params = importer.run()
            except NeedsStaticValue as err:
                wanted = graph_inputs_behind(self.model, err.input_name) & set(feeds)
                if wanted - self._static_names:
                    self._static_names |= wanted
                    continue
                raise
            if self.target != "interpreter" and importer.loop_bounds:
                # the graph executor runs no recursive function: bind what bounds the loops
                wanted = set().union(*(graph_inputs_behind(self.model, n)
                                       for n in importer.loop_bounds)) & set(feeds)
                if wanted - self._static_names:
                    self._static_names |= wanted
                    continue
            runner = self._compile(mod, params)
            self._compiled[key] = runner
            self.mod = mod
            return runner

    def _compile(self, mod, params):
        names = [p.name_hint for p in mod["main"].params]
        if self.target == "interpreter":
            from ...backends.interpreter import Interpreter
            from ...passes import InferType
            fn = Interpreter(InferType()(mod)).evaluate()

            def run(feeds):
                return fn(*[feeds[n] if n in feeds else params[n] for n in names])
            return run
        from ...backends.build import build
        from ...passes.infra import PassContext
        with PassContext(opt_level=self.opt_level):
            lib = build(mod, target=self.target, params=params or None)

        def run_built(feeds):
            # one set_input per input: a graph input may be called `name` or `value`, the
            # parameters of set_input itself
            for n in names:
                if n in feeds:
                    lib.set_input(n, feeds[n])
            return lib.run()
        return run_built

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = {k: np.asarray(v) for k, v in inputs.items()}
        else:
            inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
            feeds = {n: np.asarray(v) for n, v in zip(self.input_names, inputs)}
        runner = self._module(feeds)
        out = runner({n: v for n, v in feeds.items() if n not in self._static_names})
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        return tuple(np.asarray(o) for o in outs)


def graph_inputs_behind(model, name: str) -> set:
    """The graph inputs the value ``name`` is computed from (through subgraphs too)."""
    producers: dict = {}
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            reads = [n for n in node.input if n]
            for attr in node.attribute:
                subs = ([attr.g] if attr.g.ByteSize() else []) + list(attr.graphs)
                for sub in subs:
                    stack.append(sub)
                    reads.extend(n for sn in sub.node for n in sn.input if n)
            for out in node.output:
                producers[out] = reads
    inputs = {vi.name for vi in model.graph.input}
    found, seen, todo = set(), set(), [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if current in inputs:
            found.add(current)
        todo.extend(producers.get(current, ()))
    return found


class RelaybenchBackend(Backend):
    """``onnx.backend.base.Backend`` for relaybench (CPU: the interpreter or ``llvm``)."""

    @classmethod
    def prepare(cls, model, device: str = "CPU", target: str = "interpreter", **kwargs):
        model = load_model(model)
        return RelaybenchRep(model, target=target, **kwargs)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"


prepare = RelaybenchBackend.prepare
run_model = RelaybenchBackend.run_model
supports_device = RelaybenchBackend.supports_device


# ---- the node tests -------------------------------------------------------------------------------

_FLOAT = {1, 10, 11}
_INT = {2, 3, 4, 5, 6, 7, 12, 13}
_BOOL = {9}


def node_test_dir() -> str:
    import onnx.backend.test
    return os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "node")


def _value_kinds(model) -> list:
    """``(kind, elem_type)`` of each graph input and output (kind: tensor, sequence ...)."""
    out = []
    for vi in list(model.graph.input) + list(model.graph.output):
        kind = vi.type.WhichOneof("value")
        elem = vi.type.tensor_type.elem_type if kind == "tensor_type" else None
        out.append((kind, elem))
    return out


def categorize(model) -> str:
    """``float``, ``integer``, ``boolean`` (by the first output's dtype) or ``other`` (any
    non-tensor value or a dtype outside float16/32/64, the integers and bool)."""
    kinds = _value_kinds(model)
    if any(k != "tensor_type" or e not in _FLOAT | _INT | _BOOL for k, e in kinds):
        return "other"
    first = model.graph.output[0].type.tensor_type.elem_type
    return "float" if first in _FLOAT else "boolean" if first in _BOOL else "integer"


def node_cases(pattern: str = "test_*") -> list:
    """Every node test directory as ``(name, directory)``, sorted by name."""
    root = node_test_dir()
    return [(os.path.basename(d), d) for d in sorted(glob.glob(os.path.join(root, pattern)))
            if os.path.exists(os.path.join(d, "model.onnx"))]


def _read_value(path: str, kind: str):
    import onnx
    from onnx import numpy_helper
    data = open(path, "rb").read()
    if kind == "tensor_type":
        t = onnx.TensorProto()
        t.ParseFromString(data)
        return numpy_helper.to_array(t)
    if kind == "sequence_type":
        s = onnx.SequenceProto()
        s.ParseFromString(data)
        return numpy_helper.to_list(s)
    if kind == "optional_type":
        o = onnx.OptionalProto()
        o.ParseFromString(data)
        return numpy_helper.to_optional(o)
    raise ValueError(f"a {kind} value")


def load_case(directory: str):
    """``(model, [(inputs, expected outputs), ...])`` of one node test."""
    import onnx
    model = onnx.load(os.path.join(directory, "model.onnx"))
    in_kinds = [vi.type.WhichOneof("value") for vi in model.graph.input]
    out_kinds = [vi.type.WhichOneof("value") for vi in model.graph.output]
    sets = []
    for data_dir in sorted(glob.glob(os.path.join(directory, "test_data_set_*"))):
        ins = [_read_value(os.path.join(data_dir, f"input_{i}.pb"), k)
               for i, k in enumerate(in_kinds) if os.path.exists(os.path.join(data_dir, f"input_{i}.pb"))]
        outs = [_read_value(os.path.join(data_dir, f"output_{i}.pb"), k)
                for i, k in enumerate(out_kinds)]
        sets.append((ins, outs))
    return model, sets


def _tolerances(name: str) -> tuple:
    """The case's ``(rtol, atol)`` as ONNX's loader gives them."""
    from onnx.backend.test.loader import load_model_tests
    global _TOL
    if _TOL is None:
        _TOL = {c.name: (c.rtol, c.atol) for c in load_model_tests(kind="node")}
    return _TOL.get(name, (1e-3, 1e-7))


_TOL: Optional[dict] = None


def _compare(expected, got, rtol: float, atol: float) -> Optional[str]:
    if len(expected) != len(got):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got)):
        e, g = np.asarray(e), np.asarray(g)
        if e.dtype != g.dtype:
            return f"output {i} has dtype {g.dtype}, expected {e.dtype}"
        if e.shape != g.shape:
            return f"output {i} has shape {g.shape}, expected {e.shape}"
        if e.dtype == object:
            if not np.array_equal(e, g):
                return f"output {i} differs"
            continue
        try:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
        except AssertionError:
            return f"output {i} differs beyond rtol={rtol}, atol={atol}"
    return None


def error_reason(err: BaseException) -> str:
    """A short, countable reason for an error (the first line, without node names)."""
    if isinstance(err, UnsupportedOps):
        return "unsupported op: " + ", ".join(sorted({o for _, o, _, _ in err.missing}))
    if isinstance(err, NeedsStaticValue):
        return "needs a static value"
    kind = ("import" if isinstance(err, OnnxImportError) else
            "relaybench" if isinstance(err, RelayError) else type(err).__name__)
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{kind}: {first[:160]}"


def run_case(name: str, directory: str, prepare_fn, runner_error=None) -> tuple:
    """Run node test ``name`` with ``prepare_fn(model) -> rep``: ``(status, reason)``."""
    try:
        model, sets = load_case(directory)
    except Exception as err:
        return "error", f"test data unreadable: {type(err).__name__}"
    rtol, atol = _tolerances(name)
    try:
        rep = prepare_fn(model)
        for ins, outs in sets:
            got = rep.run(ins)
            problem = _compare(outs, list(got), rtol, atol)
            if problem:
                return "fail", problem
    except Exception as err:  # every failure is counted with its reason
        return "error", (runner_error or error_reason)(err)
    return "pass", ""
