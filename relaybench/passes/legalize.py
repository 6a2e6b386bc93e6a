"""Legalize: calls the target cannot run well rewritten into ones it can (Relay's ``legalize.cc``,
``relay.transform.Legalize()``), driven by the ``FTVMLegalize`` attributes of the operators.

For each call whose operator has an ``FTVMLegalize`` registration for the current target
(:func:`relaybench.op.register_legalize`; the one of the highest level wins, see
:mod:`relaybench.op.registry`), the pass calls it as Relay does::

    fn(attrs, inputs, types) -> Expr | None

``attrs`` are the call's attributes, ``inputs`` its arguments (already legalized), ``types`` the
arguments' types followed by the call's type. The function returns an expression of the inputs
that computes the same value (it must have the call's type: an error names the operator when it
has not), or ``None`` to keep the call. The replacement is not legalized again. Calls are visited
children first, iteratively; fused (``Primitive``) functions are left alone. With nothing
registered for the target, the pass returns its module untouched, as it does in Relay's build,
where it runs first (:mod:`relaybench.passes.pipelines`), at opt_level 1.

**The target.** The current target is the PassContext's ``config["relay.target"]`` (a target
string such as ``"llvm -mcpu=native"``, a kind, or a Target; ``rb.build`` sets it), ``llvm``
when none is given (:func:`current_target`). The target's strategy module is imported before the
registry is read, since that is where a target registers its own policies
(:func:`load_target_policies`); a registration made for another target does not apply.

Here a convolution whose channel count is odd is padded to an even one, as a target with
two-lane kernels would want, and the padding sliced off its result:

>>> import relaybench as rb
>>> from relaybench import op
>>> def even_channels(attrs, inputs, types):
...     data, weight = inputs
...     channels = types[1].shape[0]
...     if channels % 2 == 0:
...         return None
...     weight = op.nn.pad(weight, pad_width=((0, 1), (0, 0), (0, 0), (0, 0)))
...     conv = op.nn.conv2d(data, weight, **dict(attrs, channels=channels + 1))
...     return op.strided_slice(conv, begin=(0, 0), end=(types[2].shape[0], channels), axes=(0, 1))
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(3, 2, 1, 1), float32]) {
...   nn.conv2d(%x, %w, channels=3, kernel_size=[1, 1])
... }''')
>>> with op.attr_scope():
...     _ = op.register_legalize("nn.conv2d", even_channels)
...     print(Legalize()(mod)["main"].body.astext(show_types=False))
free_var %x: Tensor[(1, 2, 4, 4), float32];
free_var %w: Tensor[(3, 2, 1, 1), float32];
%0 = nn.pad(%w, 0f, pad_width=[[0, 1], [0, 0], [0, 0], [0, 0]]);
%1 = nn.conv2d(%x, %0, channels=4, kernel_size=[1, 1]);
strided_slice(%1, begin=[0, 0], end=[1, 3], axes=[0, 1])
>>> Legalize()(mod) is mod        # nothing registered
True
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir.expr import Call, Expr, Op, Var
from ..ir.functor import ExprMutator, FusedAwareMutator
from ..op.registry import get_op_attr, op_attr_registrations
from .infra import PassContext, module_pass, rewrite_each_function

__all__ = ["Legalize", "legalize", "current_target", "load_target_policies", "TARGET_CONFIG"]

TARGET_CONFIG = "relay.target"
"""The PassContext config key naming the target the passes optimize for."""

_LOADED: set = set()


def current_target(ctx: PassContext = None) -> str:
    """The kind of the target the passes run for: the PassContext's ``config["relay.target"]``
    (a target string, a kind or a Target), ``"llvm"`` when none is given.

    >>> with PassContext(config={"relay.target": "llvm -num-threads=2"}):
    ...     current_target()
    'llvm'
    """
    ctx = ctx if ctx is not None else PassContext.current()
    value = ctx.get_config(TARGET_CONFIG)
    if value is None:
        return "llvm"
    kind = getattr(value, "kind", value)
    if not isinstance(kind, str) or not kind.strip():
        raise ValueError(f"PassContext config {TARGET_CONFIG!r} must name a target such as 'llvm', "
                         f"got {value!r}")
    return kind.split()[0]


def load_target_policies(target) -> None:
    """Import the strategy module of ``target``'s kind, where the target registers its attributes
    (layout policies, legalizations) at level 0; a kind without a strategy registers nothing."""
    kind = getattr(target, "kind", target).split()[0]
    if kind in _LOADED:
        return
    from ..backends.strategy import get_strategy
    try:
        get_strategy(kind)
    except CompileError:
        pass
    _LOADED.add(kind)


def registered_for(target, key: str) -> dict:
    """Operator name -> its attribute ``key`` for ``target`` (the registration of the highest
    level), for every operator that has one; the target's own policies are loaded first."""
    load_target_policies(target)
    out = {}
    for name, registered, _level, _target in op_attr_registrations():
        if registered == key and name not in out:
            fn = get_op_attr(name, key, target=target)
            if fn is not None:
                out[name] = fn
    return out


def _legalizations(target) -> dict:
    """Operator name -> its ``FTVMLegalize`` for ``target``."""
    return registered_for(target, "FTVMLegalize")


class _Legalizer(FusedAwareMutator):
    def __init__(self, rules: dict):
        super().__init__()
        self.rules = rules

    def visit_call(self, call):
        new = super().visit_call(call)
        if not isinstance(call.op, Op):
            return new
        fn = self.rules.get(call.op.name)
        if fn is None:
            return new
        out = fn(new.attrs, list(new.args), [a.checked_type for a in call.args] + [call.checked_type])
        if out is None:
            return new
        if not isinstance(out, Expr):
            raise TypeError(f"Legalize: the FTVMLegalize of {call.op.name} returned {out!r}; it returns "
                            f"an expression or None")
        _check_type(call, new, out)
        return out


def _check_type(call: Call, new: Call, out: Expr) -> None:
    """The replacement of ``call`` must have its type (its inputs standing for themselves)."""
    from ..ir.structural import structural_equal
    from ..ir.type_infer import infer_expr
    sub = ExprMutator()
    for i, (a, b) in enumerate(zip(new.args, call.args)):
        sub.memo[a] = Var(f"input{i}", b.checked_type)
    got = infer_expr(sub.visit(out))
    if not structural_equal(got, call.checked_type):
        raise ValueError(f"Legalize: the FTVMLegalize of {call.op.name} replaced a call of type "
                         f"{call.checked_type} by an expression of type {got}")


def legalize(mod, target="llvm"):
    """``mod`` with every call that has an ``FTVMLegalize`` for ``target`` legalized; the same
    object when none has."""
    load_target_policies(target)
    rules = _legalizations(target)
    if not rules:
        return mod
    return rewrite_each_function(mod, lambda func: _Legalizer(rules).visit(func), ops=rules)


@module_pass(opt_level=1)
def Legalize(mod, ctx):
    """Rewrite the calls whose operator has an ``FTVMLegalize`` for the current target
    (``config["relay.target"]``, else ``llvm``) into what that function returns."""
    return legalize(mod, current_target(ctx))
