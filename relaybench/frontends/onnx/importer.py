"""The ONNX graph walker: ``GraphProto`` in, a Relay ``@main`` and its params out.

This is Relay's ``relay/frontend/onnx.py`` ``GraphProto`` class, organised around one idea: each
ONNX value name maps to a Relay expression, and every node is turned into Relay by the converter
its op type and opset select in :data:`relaybench.frontends.onnx.table.CONVERTERS`.

What the walker does for the converters:

* **types as it goes.** ``ctx.type(expr)`` types a new expression from its inputs' types alone
  (each argument is stood in for by a variable of its type), so importing a model of N nodes
  costs N small inferences, not N inferences of a growing program;
* **values known at import time.** Initializers (when frozen), ``Constant`` nodes and every node
  whose inputs are all constants are evaluated by the reference interpreter when imported, so
  ``Shape -> Gather -> Concat -> Reshape`` chains of a static model become a plain ``reshape``.
  ``ctx.static(expr)`` gives such a value to a converter that needs one (Reshape's shape,
  Slice's starts, TopK's k ...) and raises :class:`NeedsStaticValue` naming the node and input
  otherwise: relaybench's ops take shapes as attributes, as Relay's static ops do;
* **symbolic dims.** An input dim the model names (``dim_param``) becomes a symbolic dim of that
  name, an unnamed one ``?``, unless ``shape=`` fixes it. ``Shape`` of such a tensor and what
  exporters compute from it (``Gather``, ``Unsqueeze``, ``Concat``, ``Slice``, ``Cast``) are
  followed as dims (:data:`_SHAPE_RULES`), so ``Reshape(x, [batch, -1])`` still becomes
  ``reshape(newshape=[0, -1])`` with the batch left symbolic;
* **one error for every unsupported op.** Before anything is converted the whole graph,
  subgraphs included, is checked against the table, and every op type without a converter for
  its opset is listed with the nodes that use it.
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np

from ...errors import RelayError
from ...ir.analysis import free_vars
from ...ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from ...ir.module import IRModule
from ...ir.symbolic import ANY, as_dim
from ...ir.types import TensorType, TupleType

#: ONNX ``TensorProto.DataType`` codes relaybench has a dtype for.
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
               7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}

#: Names of the other codes, for error messages.
ONNX_DTYPE_NAMES = {0: "undefined", 8: "string", 14: "complex64", 15: "complex128",
                    16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2",
                    20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1",
                    24: "float8e8m0", 25: "uint2", 26: "int2"}

#: The opsets of the default domain the converters are written for.
MIN_OPSET, MAX_OPSET = 7, 23


class OnnxImportError(RelayError):
    """An ONNX model could not be imported; the message names the node, op and input."""


class UnsupportedOps(OnnxImportError):
    """Ops without a converter: ``missing`` lists ``(domain, op_type, opset, node names)``."""

    def __init__(self, missing: list):
        self.missing = missing
        lines = []
        for domain, op_type, version, names in missing:
            shown = ", ".join(repr(n) for n in names[:5]) + (" ..." if len(names) > 5 else "")
            where = f"{domain}." if domain else ""
            lines.append(f"  {where}{op_type} (opset {version}): {len(names)} node(s): {shown}")
        super().__init__(f"{len(missing)} ONNX op type(s) have no converter:\n" + "\n".join(lines))


class NeedsStaticValue(OnnxImportError):
    """A converter needs an input's value at import time and it depends on a graph input."""

    def __init__(self, message: str, input_name: str):
        self.input_name = input_name
        super().__init__(message)


def dtype_of(code: int, where: str) -> str:
    """The relaybench dtype of an ONNX element type code, or an error naming ``where``."""
    if code in ONNX_DTYPES:
        return ONNX_DTYPES[code]
    name = ONNX_DTYPE_NAMES.get(code, f"code {code}")
    raise OnnxImportError(f"{where}: element type {name} is not supported")


def tensor_to_numpy(tensor, where: str) -> np.ndarray:
    """An ONNX ``TensorProto`` (initializer, attribute) as a numpy array of a supported dtype."""
    from onnx import numpy_helper
    dtype_of(tensor.data_type, where)
    try:
        return np.asarray(numpy_helper.to_array(tensor))
    except Exception as err:  # a damaged tensor (wrong byte count, missing external data)
        raise OnnxImportError(f"{where}: cannot read tensor {tensor.name!r}: {err}") from None


def _attr_value(attr, where: str):
    """The Python value of an ONNX ``AttributeProto``."""
    from onnx import AttributeProto as A
    kind = attr.type
    if kind == A.FLOAT:
        return float(attr.f)
    if kind == A.INT:
        return int(attr.i)
    if kind == A.STRING:
        return attr.s.decode("utf-8", "replace")
    if kind == A.TENSOR:
        return tensor_to_numpy(attr.t, f"{where}: attribute {attr.name}")
    if kind == A.GRAPH:
        return attr.g
    if kind == A.FLOATS:
        return [float(v) for v in attr.floats]
    if kind == A.INTS:
        return [int(v) for v in attr.ints]
    if kind == A.STRINGS:
        return [s.decode("utf-8", "replace") for s in attr.strings]
    if kind == A.GRAPHS:
        return list(attr.graphs)
    if kind == A.TENSORS:
        return [tensor_to_numpy(t, f"{where}: attribute {attr.name}") for t in attr.tensors]
    raise OnnxImportError(f"{where}: attribute {attr.name!r} has a kind ({kind}) relaybench does "
                          f"not read")


def _fold(expr: Expr):
    """Evaluate a closed expression with the reference interpreter (numpy or tuple of numpy)."""
    from ...backends.interpreter import Interpreter
    from ...ir.type_infer import infer_expr
    infer_expr(expr)
    return Interpreter().evaluate(expr)


def _as_constant(value) -> Expr:
    if isinstance(value, (tuple, list)):
        return Tuple([_as_constant(v) for v in value])
    return Constant(np.asarray(value))


def _is_closed_constant(expr) -> bool:
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, Constant):
            continue
        if isinstance(e, Tuple):
            stack.extend(e.fields)
            continue
        return False
    return True


def _sym_name(name: str) -> str:
    name = re.sub(r"\W", "_", name)
    return name if re.match(r"[A-Za-z_]", name) else "d_" + name


class Context:
    """What a converter sees: the node, its opset and attributes, and the walker's helpers."""

    def __init__(self, importer: "GraphImporter", node, version: int, opset: int):
        self.importer = importer
        self.node = node
        self.version = version     # the op schema's since-version selected by the model's opset
        self.opset = opset         # the model's opset of the node's domain
        self.where = f"{node.op_type} node {node.name or node.output[0]!r}"
        self.loops = importer.loops   # "unroll" or "recursive": how Loop and Scan are imported

    # ---- types --------------------------------------------------------------------------------
    def type(self, expr: Expr):
        return self.importer.type_of(expr)

    def shape(self, expr: Expr) -> tuple:
        t = self.type(expr)
        if not isinstance(t, TensorType):
            self.fail(f"expected a tensor, got {t}")
        return tuple(t.shape)

    def dtype(self, expr: Expr) -> str:
        t = self.type(expr)
        if not isinstance(t, TensorType):
            self.fail(f"expected a tensor, got {t}")
        return t.dtype

    def rank(self, expr: Expr) -> int:
        return len(self.shape(expr))

    def static_shape(self, expr: Expr, what: str = "input") -> tuple:
        """The shape of ``expr`` as ints, or an error naming the input when a dim is symbolic."""
        shape = self.shape(expr)
        if not all(isinstance(d, int) for d in shape):
            self.fail(f"{what} has shape {tuple(str(d) for d in shape)}; this op needs its "
                      f"dims known at import time (fix them with shape=)")
        return shape

    # ---- values known at import time ------------------------------------------------------------
    def try_static(self, expr: Optional[Expr]):
        if expr is None:
            return None
        if isinstance(expr, Constant):
            return expr.data
        return self.importer.shape_values.get(id(expr))

    def static_ints(self, expr: Optional[Expr], what: str, like: Optional[Expr] = None) -> list:
        """A shape-like input as ints. Entries that are symbolic dims (from ``Shape`` of a
        tensor with symbolic dims) become Relay's reshape codes: 0 where the entry is the dim of
        ``like`` at the same position (copy it), -1 for one other (infer it)."""
        values = np.asarray(self.static(expr, what)).reshape(-1)
        if values.dtype != object:
            return [int(v) for v in values]
        dims = self.shape(like) if like is not None else ()
        out, inferred = [], False
        for i, v in enumerate(values):
            if isinstance(v, (int, np.integer)):
                out.append(int(v))
            elif i < len(dims) and dims[i] is v or (i < len(dims) and str(dims[i]) == str(v)):
                out.append(0)
            elif not inferred and -1 not in [int(w) for w in values if isinstance(w, (int, np.integer))]:
                out.append(-1)
                inferred = True
            else:
                self.fail(f"input {what} holds the symbolic dims {[str(v) for v in values]}, which "
                          f"relaybench cannot express (fix them with shape=)")
        return out

    def static(self, expr: Optional[Expr], what: str) -> np.ndarray:
        """The value of input ``what`` at import time, or :class:`NeedsStaticValue`."""
        value = self.try_static(expr)
        if value is None:
            name = self.importer.name_of(expr)
            raise NeedsStaticValue(f"{self.where}: input {what} ({name!r}) must be known at import "
                                   f"time (an initializer or a value computed from constants); "
                                   f"relaybench's {self.node.op_type} takes it as an attribute",
                                   name)
        return value

    def fail(self, reason: str):
        raise OnnxImportError(f"{self.where}: {reason}")

    # ---- subgraphs ------------------------------------------------------------------------------
    def subgraph(self, graph, inputs: list) -> Expr:
        """Import a subgraph (If branch, Loop or Scan body) that sees the enclosing values;
        ``inputs`` are the expressions bound to its formal inputs. Returns its outputs (a Tuple
        when there are several)."""
        return self.importer.import_subgraph(graph, inputs)


class GraphImporter:
    """Walks one ONNX model; ``run()`` returns ``(mod, params)``."""

    def __init__(self, model, shape=None, dtype="float32", opset=None, freeze_params=True,
                 static_inputs=None, loops="unroll"):
        from ._control import LOOP_MODES
        from .table import CONVERTERS
        if loops not in LOOP_MODES:
            raise ValueError(f"from_onnx: loops={loops!r}; expected one of "
                             f"{', '.join(map(repr, LOOP_MODES))}")
        self.loops = loops
        self.model = model
        self.graph = model.graph
        self.table = CONVERTERS
        self.shape_overrides = dict(shape or {})
        self.dtype = dtype
        self.freeze_params = freeze_params
        self.static_inputs = dict(static_inputs or {})
        self.opsets = {}
        for entry in model.opset_import:
            domain = "" if entry.domain in ("", "ai.onnx") else entry.domain
            self.opsets[domain] = int(entry.version)
        if opset is not None:
            self.opsets[""] = int(opset)
        if "" not in self.opsets:
            self.opsets[""] = MAX_OPSET
        self.values: list = [{}]    # scopes: name -> Expr (innermost last)
        self._types: dict = {}      # id(expr) -> (expr, type)
        self._names: dict = {}      # id(expr) -> ONNX name
        self.params: dict = {}
        self._sym: dict = {}
        self.shape_values: dict = {}   # id(expr) -> object array of dims (ints, symbolic dims)
        self.loop_bounds: list = []    # names of the data-dependent trip counts and conditions
        #                                of loops made recursive under loops="unroll"

    # ---- lookups ------------------------------------------------------------------------------
    def lookup(self, name: str):
        for scope in reversed(self.values):
            if name in scope:
                return scope[name]
        return None

    def bind(self, name: str, expr: Expr):
        self.values[-1][name] = expr
        self._names.setdefault(id(expr), name)

    def name_of(self, expr) -> str:
        return self._names.get(id(expr), "?")

    def type_of(self, expr: Expr):
        """The type of ``expr``, inferring each new node from its arguments' known types."""
        from ...ir.type_infer import infer_expr
        cached = self._types.get(id(expr))
        if cached is not None:
            return cached[1]
        order, stack, seen = [], [(expr, False)], set()
        while stack:
            node, ready = stack.pop()
            if id(node) in self._types:
                continue
            if ready:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            if isinstance(node, Call) and isinstance(node.op, Op):
                stack.extend((a, False) for a in node.args)
            elif isinstance(node, Tuple):
                stack.extend((f, False) for f in node.fields)
            elif isinstance(node, TupleGetItem):
                stack.append((node.tuple_value, False))
        for node in order:
            if isinstance(node, Constant):
                t = TensorType(tuple(node.data.shape), str(node.data.dtype))
            elif isinstance(node, Var) and node.type_annotation is not None:
                t = node.type_annotation
            elif isinstance(node, Tuple):
                t = TupleType(tuple(self._types[id(f)][1] for f in node.fields))
            elif isinstance(node, TupleGetItem):
                t = self._types[id(node.tuple_value)][1].fields[node.index]
            elif isinstance(node, Call) and isinstance(node.op, Op):
                stand_ins = [Var(f"a{i}", self._types[id(a)][1]) for i, a in enumerate(node.args)]
                t = infer_expr(Call(node.op, stand_ins, node.attrs))
            else:
                t = infer_expr(node)
            self._types[id(node)] = (node, t)
        return self._types[id(expr)][1]

    # ---- the unsupported-op check -------------------------------------------------------------
    def _version(self, domain: str, op_type: str) -> Optional[int]:
        """The since-version of the op's schema at the model's opset (the key into the table)."""
        opset = self.opsets.get(domain)
        if opset is None:
            return None
        try:
            from onnx import defs
            return defs.get_schema(op_type, opset, domain).since_version
        except Exception:
            return opset

    def converter(self, domain: str, op_type: str):
        entries = self.table.get(op_type if not domain else f"{domain}.{op_type}")
        version = self._version(domain, op_type)
        if not entries or version is None:
            return None, version
        chosen = None
        for since, func in entries:
            if since <= version:
                chosen = func
        return chosen, version

    def check_supported(self):
        missing: dict = {}
        stack = [self.graph]
        while stack:
            graph = stack.pop()
            for node in graph.node:
                domain = "" if node.domain in ("", "ai.onnx") else node.domain
                func, version = self.converter(domain, node.op_type)
                if func is None:
                    key = (domain, node.op_type, version if version is not None else "?")
                    missing.setdefault(key, []).append(node.name or node.output[0])
                for attr in node.attribute:
                    if attr.g.ByteSize():
                        stack.append(attr.g)
                    stack.extend(attr.graphs)
        if missing:
            raise UnsupportedOps([(d, o, v, names) for (d, o, v), names in sorted(
                missing.items(), key=lambda kv: (kv[0][0], kv[0][1]))])

    # ---- inputs and initializers ----------------------------------------------------------------
    def _value_type(self, value_info, default_dtype: Optional[str]) -> TensorType:
        name = value_info.name
        kind = value_info.type.WhichOneof("value") if value_info.HasField("type") else None
        if kind not in (None, "tensor_type"):
            raise OnnxImportError(f"graph input {name!r}: a {kind.replace('_type', '')} value; "
                                  f"relaybench imports tensor inputs only")
        tt = value_info.type.tensor_type
        if isinstance(self.dtype, dict) and name in self.dtype:
            dtype = self.dtype[name]
        elif tt.elem_type:
            dtype = dtype_of(tt.elem_type, f"graph input {name!r}")
        else:
            dtype = default_dtype or "float32"
        if name in self.shape_overrides:
            shape = tuple(as_dim(d) if d is not None else ANY for d in self.shape_overrides[name])
        elif tt.HasField("shape"):
            dims = []
            for d in tt.shape.dim:
                which = d.WhichOneof("value")
                if which == "dim_value" and d.dim_value >= 0:
                    dims.append(int(d.dim_value))
                elif which == "dim_param" and d.dim_param:
                    dims.append(as_dim(self._sym.setdefault(d.dim_param, _sym_name(d.dim_param))))
                else:
                    dims.append(ANY)
            shape = tuple(dims)
        else:
            raise OnnxImportError(f"graph input {name!r} has no shape; give it with shape=")
        return TensorType(shape, dtype)

    def _inputs(self):
        initializers = {t.name for t in self.graph.initializer}
        inputs = []
        for t in self.graph.initializer:
            value = tensor_to_numpy(t, f"initializer {t.name!r}")
            if self.freeze_params or value.dtype.kind in "iub" and value.size <= 64:
                self.bind(t.name, Constant(value))
            else:
                v = Var(t.name, TensorType(value.shape, str(value.dtype)))
                self.params[t.name] = value
                self.bind(t.name, v)
        for vi in self.graph.input:
            if vi.name in initializers:
                continue
            if vi.name in self.static_inputs:
                self.bind(vi.name, Constant(np.asarray(self.static_inputs[vi.name])))
                continue
            v = Var(vi.name, self._value_type(vi, self.dtype if isinstance(self.dtype, str)
                                              else None))
            inputs.append(v)
            self.bind(vi.name, v)
        for t in self.graph.sparse_initializer:
            raise OnnxImportError(f"sparse initializer {t.values.name!r}: not supported")
        return inputs

    # ---- nodes --------------------------------------------------------------------------------
    def convert_node(self, node):
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        func, version = self.converter(domain, node.op_type)
        ctx = Context(self, node, version, self.opsets.get(domain, MAX_OPSET))
        args = []
        for i, name in enumerate(node.input):
            if not name:
                args.append(None)
                continue
            expr = self.lookup(name)
            if expr is None:
                raise OnnxImportError(f"{ctx.where}: input {i} {name!r} is not produced by any "
                                      f"node, initializer or graph input before it")
            args.append(expr)
        attrs = {a.name: _attr_value(a, ctx.where) for a in node.attribute}
        try:
            out = func(ctx, args, attrs)
        except (OnnxImportError, RelayError):
            raise
        except (ValueError, TypeError, IndexError, KeyError) as err:
            raise OnnxImportError(f"{ctx.where}: {err}") from err
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        for expr in outs:
            if expr is not None:
                try:
                    self.type_of(expr)
                except RelayError as err:
                    raise OnnxImportError(f"{ctx.where}: {err}") from err
        rule = _SHAPE_RULES.get(node.op_type)
        if rule is not None and len(outs) == 1 and not _is_closed_constant(outs[0]):
            known = [None if a is None else ctx.try_static(a) for a in args]
            if node.op_type == "Shape" or all(k is not None or a is None for k, a in zip(known, args)):
                try:
                    value = rule(ctx, args, known, attrs)
                except (ValueError, IndexError, TypeError):
                    value = None
                if value is not None:
                    self.shape_values[id(outs[0])] = value
        if args and all(a is None or _is_closed_constant(a) for a in args) and \
                node.op_type not in _NO_FOLD:
            outs = [e if e is None or _is_closed_constant(e) or free_vars(e) else
                    _as_constant(_fold(e)) for e in outs]
        for i, name in enumerate(node.output):
            if not name:
                continue
            if i >= len(outs) or outs[i] is None:
                if i < len(outs) or i == 0:
                    raise OnnxImportError(f"{ctx.where}: output {i} {name!r} is not produced")
                continue
            self.bind(name, outs[i])

    def _outputs(self, graph) -> list:
        outs = []
        for vi in graph.output:
            expr = self.lookup(vi.name)
            if expr is None:
                raise OnnxImportError(f"graph output {vi.name!r} is produced by no node")
            outs.append(expr)
        return outs

    def import_subgraph(self, graph, inputs: list) -> Expr:
        self.values.append({})
        try:
            for t in graph.initializer:
                self.bind(t.name, Constant(tensor_to_numpy(t, f"initializer {t.name!r}")))
            for vi, expr in zip(graph.input, inputs):
                self.bind(vi.name, expr)
            for node in graph.node:
                self.convert_node(node)
            outs = self._outputs(graph)
        finally:
            self.values.pop()
        return outs[0] if len(outs) == 1 else Tuple(outs)

    def run(self):
        self.check_supported()
        inputs = self._inputs()
        for node in self.graph.node:
            self.convert_node(node)
        outs = self._outputs(self.graph)
        body = outs[0] if len(outs) == 1 else Tuple(outs)
        if isinstance(body, Var) or isinstance(body, Constant):
            from ...op import copy
            body = copy(body)
        fn_params = inputs + [self.lookup(n) for n in self.params]
        mod = IRModule.from_expr(Function(fn_params, body))
        return mod, dict(self.params)


def _shape_of(ctx, args, known, attrs):
    dims = list(ctx.shape(args[0]))
    rank = len(dims)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    out = np.empty(len(dims[start:end]), dtype=object)
    out[:] = dims[start:end]
    return out


def _gather_dims(ctx, args, known, attrs):
    return np.take(np.asarray(known[0], dtype=object), np.asarray(known[1]).astype(np.int64),
                   axis=attrs.get("axis", 0))


def _unsqueeze_dims(ctx, args, known, attrs):
    axes = attrs.get("axes") if len(known) < 2 or known[1] is None else list(np.asarray(known[1]).reshape(-1))
    out = np.asarray(known[0], dtype=object)
    for a in sorted(int(a) % (out.ndim + len(axes)) for a in axes):
        out = np.expand_dims(out, a)
    return out


def _squeeze_dims(ctx, args, known, attrs):
    axes = attrs.get("axes") if len(known) < 2 or known[1] is None else list(np.asarray(known[1]).reshape(-1))
    out = np.asarray(known[0], dtype=object)
    return np.squeeze(out, axis=None if axes is None else tuple(int(a) for a in axes))


def _concat_dims(ctx, args, known, attrs):
    return np.concatenate([np.asarray(k, dtype=object) for k in known if k is not None],
                          axis=attrs["axis"])


def _slice_dims(ctx, args, known, attrs):
    value = np.asarray(known[0], dtype=object)
    if value.ndim != 1:
        return None
    start, end = int(np.asarray(known[1]).reshape(-1)[0]), int(np.asarray(known[2]).reshape(-1)[0])
    step = int(np.asarray(known[4]).reshape(-1)[0]) if len(known) > 4 and known[4] is not None else 1
    n = len(value)
    return value[slice(max(min(start, n), -n - 1), max(min(end, n), -n - 1), step)]


def _same_dims(ctx, args, known, attrs):
    return np.asarray(known[0], dtype=object)


#: How ``Shape`` and the ops exporters apply to its result compute on dims known at import time
#: (ints and symbolic dims), so a ``Reshape`` to ``[batch, -1]`` of a model with a symbolic
#: batch stays a static ``reshape`` (its symbolic entries become Relay's 0 "copy the dim").
_SHAPE_RULES = {"Shape": _shape_of, "Gather": _gather_dims, "Unsqueeze": _unsqueeze_dims,
                "Squeeze": _squeeze_dims, "Concat": _concat_dims, "Slice": _slice_dims,
                "Cast": _same_dims, "Identity": _same_dims}


#: Ops whose outputs are not folded even when every input is a constant (random numbers).
_NO_FOLD = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                      "Multinomial", "Bernoulli"})


def load_model(model_or_path):
    """An ONNX ``ModelProto`` from a model, a path or bytes, or a clear error."""
    try:
        import onnx
    except ImportError:
        raise ImportError("importing ONNX models needs the onnx package: pip install onnx") from None
    if isinstance(model_or_path, onnx.ModelProto):
        model = model_or_path
    else:
        source = model_or_path
        try:
            if isinstance(source, (bytes, bytearray)):
                model = onnx.load_from_string(bytes(source))
            else:
                model = onnx.load(str(source))
        except FileNotFoundError:
            raise
        except Exception as err:
            where = "the given bytes" if isinstance(source, (bytes, bytearray)) else str(source)
            raise OnnxImportError(f"{where}: not a readable ONNX model ({type(err).__name__}: "
                                  f"{err})") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise OnnxImportError("the ONNX model has no graph (an empty or damaged file?)")
    return model


def from_onnx(model_or_path, shape=None, dtype="float32", opset=None, freeze_params=True,
              static_inputs=None, loops="unroll"):
    """Import an ONNX model as ``(mod, params)``, Relay's ``relay.frontend.from_onnx``.

    ``shape`` maps input names to shapes (an entry may be an int, a symbolic name or None for
    ``?``) and overrides the model's; ``dtype`` is the dtype of inputs the model leaves untyped
    (a dict gives it per input); ``opset`` overrides the model's default-domain opset;
    ``freeze_params=True`` makes initializers constants (folded where they feed constant
    computations), ``False`` makes them parameters of ``@main`` returned in ``params``.
    ``static_inputs`` maps graph inputs to values that are bound as constants (for ops that need
    their value at import time).

    ``loops`` says how ``Loop`` and ``Scan`` are imported: ``"unroll"`` (the default) unrolls
    every ``Scan`` and every ``Loop`` whose iterations are known at import time, so that the
    graph executor can compile them, and makes the other loops recursive Relay functions;
    ``"recursive"`` makes every ``Loop`` and ``Scan`` a local recursive function (its scan
    outputs accumulated along an axis of extent ``?``), never unrolled, which the interpreter
    and the VM run.

    >>> import onnx
    >>> from onnx import helper, TensorProto
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    >>> mod, params = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    >>> print(mod["main"].astext(show_types=False))
    fn (%x: Tensor[(n, 3), float32]) {
      nn.relu(%x)
    }
    """
    model = load_model(model_or_path)
    return GraphImporter(model, shape=shape, dtype=dtype, opset=opset,
                         freeze_params=freeze_params, static_inputs=static_inputs,
                         loops=loops).run()
