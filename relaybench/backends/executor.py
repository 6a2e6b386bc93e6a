"""``create_executor(kind, mod, target)``: Relay's interface to run a module.

>>> import numpy as np, relaybench as rb
>>> x = rb.var("x", shape=(3,))
>>> mod = rb.IRModule.from_expr(rb.Function([x], x + x))
>>> rb.create_executor("interpreter", mod=mod).evaluate()(np.ones(3, "float32"))
array([2., 2., 2.], dtype=float32)
"""

from __future__ import annotations

from typing import Optional

from ..ir.expr import Expr
from ..ir.module import IRModule


class Executor:
    """Runs expressions of a module. ``evaluate()`` gives ``@main`` as a Python function."""

    def __init__(self, mod: Optional[IRModule], target=None):
        self.mod = mod if mod is not None else IRModule()
        self.target = target

    def evaluate(self, expr: Optional[Expr] = None, binds: Optional[dict] = None):
        raise NotImplementedError


class InterpreterExecutor(Executor):
    """The reference interpreter. The module is type-checked first, as in Relay."""

    def __init__(self, mod: Optional[IRModule], target=None):
        super().__init__(mod, target)
        from ..passes import InferType
        from .interpreter import Interpreter
        if len(self.mod):
            self.mod = InferType()(self.mod)
        self._interp = Interpreter(self.mod)

    def evaluate(self, expr: Optional[Expr] = None, binds: Optional[dict] = None):
        if expr is not None and not isinstance(expr, IRModule):
            from ..ir.expr import GlobalVar
            if not isinstance(expr, GlobalVar):
                from ..ir.type_infer import infer_expr
                infer_expr(expr, self.mod)
        return self._interp.evaluate(expr, binds)


class GraphExecutor(Executor):
    """The graph executor: ``evaluate()`` builds ``@main`` once (opt_level and passes from the
    current PassContext, 2 by default as in Relay) and returns a function of its inputs, given
    in order or by name, that runs the compiled module and returns numpy arrays."""

    def __init__(self, mod: Optional[IRModule], target=None):
        super().__init__(mod, target if target is not None else "llvm")
        self._built: dict = {}

    def evaluate(self, expr: Optional[Expr] = None, binds: Optional[dict] = None):
        from ..ir.expr import Function, GlobalVar
        if binds:
            raise ValueError("the graph executor takes no binds; pass the values as inputs")
        if expr is None or (isinstance(expr, GlobalVar) and expr.name_hint == "main"):
            mod, key = self.mod, "main"
        elif isinstance(expr, Function):
            mod, key = IRModule.from_expr(expr), expr
        else:
            raise ValueError("the graph executor evaluates @main or a Function, not "
                             f"{type(expr).__name__}")
        graph = self._built.get(key)
        if graph is None:
            from ..passes.infra import PassContext
            from .build import build
            ctx = PassContext.current()
            graph = build(mod, self.target, opt_level=ctx.opt_level,
                          required_pass=ctx.required_pass, disabled_pass=ctx.disabled_pass,
                          config=ctx.config, instruments=ctx.instruments)
            self._built[key] = graph
        names = graph.input_names

        def run(*args, **kwargs):
            if len(args) > len(names):
                from ..errors import ExecutionError
                raise ExecutionError(f"@main takes {len(names)} inputs ({', '.join(names)}), "
                                     f"got {len(args)}", expected=len(names), given=len(args))
            inputs = dict(zip(names, args))
            for name in kwargs:
                if name in inputs:
                    from ..errors import ExecutionError
                    raise ExecutionError(f"input {name!r} given twice", input_name=name)
            inputs.update(kwargs)
            return graph.run(**inputs)

        run.graph_module = graph
        return run


class VMExecutor(Executor):
    """The Relay VM: ``evaluate()`` compiles the whole module once (opt_level and passes from
    the current PassContext, 2 by default as in Relay) for ``target`` (default ``llvm``) and
    returns a function of a global's inputs, given in order or by name. Every program runs:
    control flow, closures, ADTs, references. Values are the interpreter's, closures the VM's
    :class:`~relaybench.backends.vm.VMClosure`.

    >>> import numpy as np, relaybench as rb
    >>> mod = rb.parse('''#[version = "0.0.5"]
    ... def @main(%x: Tensor[(2), float32], %n: int32) -> Tensor[(2), float32] {
    ...   if (equal(%n, 0)) { %x } else { @main(multiply(%x, 2f), subtract(%n, 1)) }
    ... }''')
    >>> rb.create_executor("vm", mod=mod).evaluate()(np.ones(2, "float32"), np.int32(3))
    array([8., 8.], dtype=float32)
    """

    def __init__(self, mod: Optional[IRModule], target=None):
        super().__init__(mod, target if target is not None else "llvm")
        self._machines: dict = {}

    def _machine(self, mod: IRModule, key):
        vm = self._machines.get(key)
        if vm is None:
            from ..passes.infra import PassContext
            from .vm import VirtualMachine, compile
            ctx = PassContext.current()
            exe = compile(mod, self.target, opt_level=ctx.opt_level,
                          required_pass=ctx.required_pass, disabled_pass=ctx.disabled_pass,
                          config=ctx.config, instruments=ctx.instruments)
            vm = self._machines[key] = VirtualMachine(exe)
        return vm

    def evaluate(self, expr: Optional[Expr] = None, binds: Optional[dict] = None):
        from ..ir.expr import Function, GlobalVar
        if binds:
            raise ValueError("the VM takes no binds; pass the values as inputs")
        if expr is None:
            vm, name = self._machine(self.mod, "module"), "main"
        elif isinstance(expr, GlobalVar):
            vm, name = self._machine(self.mod, "module"), expr.name_hint
        elif isinstance(expr, Function):
            # the function is @main of a module holding the others (the prelude, say)
            mod = self.mod.copy()
            mod["main"] = expr
            vm, name = self._machine(mod, expr), "main"
        else:
            raise ValueError("the VM evaluates @main, a global or a Function, not "
                             f"{type(expr).__name__}")

        def run(*args, **kwargs):
            return vm.invoke(name, *args, **kwargs)

        run.vm = vm
        return run


_KINDS = {"interpreter": InterpreterExecutor, "debug": InterpreterExecutor,
          "graph": GraphExecutor, "vm": VMExecutor}


def create_executor(kind: str = "interpreter", mod: Optional[IRModule] = None, device=None, target=None):
    """An executor of ``kind`` for ``mod``: ``"interpreter"`` (the reference, every program),
    ``"graph"`` (static dataflow compiled for ``target``, default ``llvm``) or ``"vm"`` (every
    program compiled for ``target``: control flow, closures, ADTs)."""
    try:
        cls = _KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown executor kind {kind!r}; available: {', '.join(sorted(_KINDS))}") from None
    return cls(mod, target)
