"""Pipelines: Relay's default optimization sequence, and pipelines built from names or strings.

:func:`default_pipeline` is the prefix of passes ``relay.build`` runs before lowering (TVM
v0.14 ``src/relay/backend/utils.cc::GetPassPrefix`` and ``build_module.cc``), restricted to the
target-independent passes:

====  ========================  =========  ==============================================
 #    pass                      opt_level  what it does here
====  ========================  =========  ==============================================
 1    Legalize                  1          the target's ``FTVMLegalize`` rewrites, if any
 2    SimplifyInference         0          batch_norm, dropout, ... become elementwise ops
 3    EliminateCommonSubexpr    3          equal calls on the same arguments are shared
 4    CombineParallelConv2D     4          >= 3 parallel conv2d on one input become one
 5    CombineParallelDense      4          >= 3 parallel dense on one input become one
 6    FoldConstant              2          calls on constants are evaluated
 7    FoldScaleAxis             3          scales move into convolution weights
 8    SimplifyExpr              0          reshapes merged, no-op ops removed, ...
 9    CanonicalizeCast          3          casts placed so fusion can use them
 10   CanonicalizeOps           3          bias_add becomes expand_dims + add
 11   InferType                 0          types everything again
 12   AlterOpLayout             3          the target's preferred data layouts
 13   FoldConstant              2          folds the weights' layout transforms
 14   FuseOps                   0          groups ops into Primitive functions
====  ========================  =========  ==============================================

Each pass is gated by its own opt_level through the :class:`~relaybench.passes.infra.PassContext`
the pipeline runs in, and a pass left out is reported to the instruments as skipped. FuseOps
gets ``fuse_opt_level=opt_level``: at 0 every operator is its own Primitive function, as in Relay.
Legalize and AlterOpLayout read the attributes registered for the current target, the
PassContext's ``config["relay.target"]`` (``llvm`` when none is given; ``rb.build`` gives its
target). Legalize runs first, as in Relay's prefix, where it follows only the bookkeeping passes
and ``qnn.Legalize``. Left out of Relay's prefix: the backend's passes (``qnn.Legalize``, ``PlanDevices``,
``SplitArgs``, ``FlattenAtrousConv``, ``SimplifyExprPostAlterOp``), ``FastMath`` (opt_level 4,
changes numerics), the normal-form bookkeeping ``RemoveUnusedFunctions`` and
``ToBasicBlockNormalForm`` (which only matter to Relay's C++ executors), and
``CombineParallelBatchMatmul``.

>>> [name for name, _options in DEFAULT_PASSES][:4]
['Legalize', 'SimplifyInference', 'EliminateCommonSubexpr', 'CombineParallelConv2D']

Run it inside a context of the same opt_level, or let :func:`optimize` do both:

    with PassContext(opt_level=3, instruments=[Snapshots()]):
        mod = default_pipeline(3)(mod)

:func:`build_pipeline` makes a Sequential from a pipeline string, a list of names (with options
in braces), Pass objects or ``(name, {options})`` pairs:

>>> p = build_pipeline(["infer-type", ("InferType", {})])
>>> pipeline_text(p)
'infer-type,infer-type'
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence, Union

from ..ir.module import IRModule
from .infra import (Pass, PassContext, PassInstrument, Sequential, get_pass, parse_pipeline,
                    pass_options)

__all__ = ["DEFAULT_PASSES", "default_pipeline", "optimize", "build_pipeline", "pipeline_text"]

#: Relay's build prefix, in order: (pass name, options given when the pass has them).
#: ``"opt_level"`` as a value means the pipeline's opt_level.
DEFAULT_PASSES: tuple = (
    ("Legalize", {}),
    ("SimplifyInference", {}),
    ("EliminateCommonSubexpr", {}),
    ("CombineParallelConv2D", {"min_num_branches": 3}),
    ("CombineParallelDense", {"min_num_branches": 3}),
    ("FoldConstant", {}),
    ("FoldScaleAxis", {}),
    ("SimplifyExpr", {}),
    ("CanonicalizeCast", {}),
    ("CanonicalizeOps", {}),
    ("InferType", {}),
    ("AlterOpLayout", {}),
    ("FoldConstant", {}),
    ("FuseOps", {"fuse_opt_level": "opt_level"}),
)
_SHIPPED_PASSES = DEFAULT_PASSES   # the build cache's key names a pipeline changed at run time


def default_pipeline(opt_level: Optional[int] = None) -> Sequential:
    """Relay's default optimization sequence (see the table above) as a Sequential.

    ``opt_level`` is FuseOps's ``fuse_opt_level`` (the current context's opt_level when None);
    which passes run is decided by the context the pipeline runs in, so run it in
    ``PassContext(opt_level=opt_level)`` (or call :func:`optimize`). Every pass must be
    registered: a missing one raises KeyError.
    """
    if opt_level is None:
        opt_level = PassContext.current().opt_level
    passes = []
    for name, wanted in DEFAULT_PASSES:
        factory = get_pass(name)
        known = pass_options(name)
        options = {}
        for key, value in wanted.items():
            value = opt_level if value == "opt_level" else value
            if key in known and known[key] != value:  # a default is left implicit
                options[key] = value
        passes.append(factory(**options))
    return Sequential(passes, name="default_pipeline")


def optimize(mod: IRModule, opt_level: int = 2, instruments: Sequence[PassInstrument] = (),
             required_pass: Iterable[str] = (), disabled_pass: Iterable[str] = (),
             config: Optional[dict] = None) -> IRModule:
    """Run :func:`default_pipeline` on ``mod`` in a new ``PassContext`` with these settings."""
    with PassContext(opt_level=opt_level, required_pass=required_pass, disabled_pass=disabled_pass,
                     config=config, instruments=instruments):
        return default_pipeline(opt_level)(mod)


PipelineSpec = Union[str, Pass, Sequence]


def build_pipeline(spec: PipelineSpec, name: str = "pipeline") -> Sequential:
    """A Sequential from a pipeline string (``"fold-constant,fuse-ops{fuse_opt_level=2}"``), a
    Pass, or a list whose items are names (Relay's or kebab-case, options in braces allowed),
    Pass objects or ``(name, {option: value})`` pairs. Errors name the item at fault."""
    if isinstance(spec, Sequential):
        return spec
    if isinstance(spec, Pass):
        return Sequential([spec], name=name)
    if isinstance(spec, str):
        seq = parse_pipeline(spec)
        return Sequential(seq.passes, name=name)
    if not isinstance(spec, (list, tuple)):
        raise TypeError(f"a pipeline is a string, a Pass or a list of them, not {type(spec).__name__}")
    passes: list = []
    for i, item in enumerate(spec):
        if isinstance(item, Pass):
            passes.append(item)
        elif isinstance(item, str):
            try:
                passes.extend(parse_pipeline(item).passes)
            except (KeyError, ValueError) as err:
                raise ValueError(f"pipeline item {i} ({item!r}): {err.args[0]}") from None
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], dict):
            try:
                passes.append(get_pass(item[0])(**item[1]))
            except (KeyError, TypeError) as err:
                raise ValueError(f"pipeline item {i} ({item[0]!r}): {err.args[0]}") from None
        else:
            raise TypeError(f"pipeline item {i}: expected a pass name, a Pass or (name, options), "
                            f"got {item!r}")
    return Sequential(passes, name=name)


def _option_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, str):
        bare = value and all(ch.isalnum() or ch in "_-./" for ch in value)
        return value if bare and value.lower() not in ("true", "false", "none", "null") \
            and not value[0].isdigit() else repr(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_option_text(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_option_text(k)}: {_option_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def pipeline_text(seq: Union[Sequential, Sequence[Pass]]) -> str:
    """The pipeline string of a sequence of registered passes (options included), so that
    ``build_pipeline(pipeline_text(p))`` builds the same passes again."""
    items = []
    for p in seq:
        if isinstance(p, Sequential) and p.info.name not in _registered_names():
            raise ValueError(f"pipeline_text: the nested sequence {p.info.name!r} has no pipeline-string name")
        text = p.info.kebab
        if p.info.options:
            text += "{" + ", ".join(f"{k}={_option_text(v)}" for k, v in p.info.options) + "}"
        items.append(text)
    return ",".join(items)


def _registered_names() -> set:
    from .infra import _REGISTRY
    return set(_REGISTRY)
