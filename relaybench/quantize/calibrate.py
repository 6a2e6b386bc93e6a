"""QuantizeCalibrate: the scale of every simulated_quantize (Relay's
``python/tvm/relay/quantize/_calibrate.py`` and ``kl_divergence.py``; the KL search is
``src/runtime/contrib/random/...``'s ``MinimizeKL``, here in numpy).

Each ``simulated_quantize(x, %dom_scale, %clip_min, %clip_max, kind, sign)`` gets a *scale* ``s``
(the largest magnitude it represents) and with ``valid_range = 2 ** (nbit - sign)`` (``nbit``
from the qconfig for its kind) its scalars become the float32 constants

    ``dom_scale = s / valid_range``, ``clip_min = -(valid_range - 1)``, ``clip_max = valid_range - 1``

bound in place of the parameters QuantizeAnnotate added. The scale of a WEIGHT (a constant) is,
by ``weight_scale``: ``"power2"``, ``max |w|`` rounded up to a power of two (1 when the weight
is all zeros); ``"max"``, ``max |w|``. The scale of the others is, by ``calibrate_mode``:

* ``"global_scale"``: the qconfig's ``global_scale``;
* ``"max"``: ``max |x|`` over the data set;
* ``"percentile"``: the 0.99999 percentile of ``|x|`` (``np.partition`` at ``int(n * 0.99999)``);
* ``"kl_divergence"``: the threshold whose 255-bin quantized histogram (of 8001 bins over
  ``[-max |x|, max |x|]``) is nearest the full one in KL divergence (:func:`find_scale_by_kl`).

The statistics come from running, on the reference interpreter, the program with every
simulated_quantize made the identity, on each input dict of the data set, and gathering each
quantized value (Relay's ``CreateStatsCollector``): they are float statistics.

>>> import numpy as np
>>> float(find_scale_by_percentile(np.arange(-1000, 1001, dtype="float32")))
1000.0
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.expr import Call, Constant, Function, Op, Tuple, Var
from ..ir.functor import ExprMutator, post_order
from ..ir.module import IRModule
from ..passes.infra import ModulePass, PassInfo, register_pass
from .annotate import SIMULATED_QUANTIZE
from .qconfig import QAnnotateKind, current_qconfig

__all__ = ["QuantizeCalibrate", "calibrate_module", "find_scale_by_kl", "find_scale_by_percentile",
           "power2_scale", "max_scale", "collect_stats"]


def _is_sq(node) -> bool:
    return isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == SIMULATED_QUANTIZE


# ---- scales -----------------------------------------------------------------------------------

def power2_scale(weight: np.ndarray) -> float:
    """``max |w|`` rounded up to a power of two; 1.0 for a weight of zeros."""
    val = float(np.max(np.abs(weight))) if weight.size else 0.0
    return float(2.0 ** math.ceil(math.log2(val))) if val > 0 else 1.0


def max_scale(weight: np.ndarray) -> float:
    """``max |w|`` (1.0 for a weight of zeros, so the scale stays positive)."""
    val = float(np.max(np.abs(weight))) if weight.size else 0.0
    return val if val > 0 else 1.0


def find_scale_by_percentile(arr: np.ndarray, percentile: float = 0.99999) -> float:
    """The ``percentile`` quantile of ``|arr|`` as Relay takes it: the element of rank
    ``int(size * percentile)`` in sorted order."""
    x = np.abs(np.asarray(arr).reshape(-1))
    k = min(int(x.size * percentile), x.size - 1)
    return float(np.partition(x, k)[k])


def _smooth(p: np.ndarray, eps: float = 0.0001):
    """Relay's ``SmoothDistribution``: move ``eps`` of mass onto each empty bin; None when the
    distribution is all zeros or too sparse to give up the mass."""
    zeros = p == 0
    n_zeros = int(zeros.sum())
    n_nonzeros = p.size - n_zeros
    if n_nonzeros == 0:
        return None
    eps1 = eps * n_zeros / n_nonzeros
    if eps1 >= 1.0:
        return None
    return (p + eps * zeros - eps1 * ~zeros).astype(np.float32)


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    p = p / p.sum(dtype=np.float32)
    q = q / q.sum(dtype=np.float32)
    mask = (p != 0) & (q != 0)
    return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))


def find_scale_by_kl(arr: np.ndarray, num_bins: int = 8001, num_quantized_bins: int = 255) -> float:
    """The threshold that best keeps ``arr``'s distribution when quantized to
    ``num_quantized_bins`` levels (TensorRT's entropy calibration, as Relay's ``MinimizeKL``).

    A histogram of ``num_bins`` bins over ``[-t, t]`` (``t = max |arr|``) is made; for each
    candidate half-width ``i`` (from ``num_quantized_bins // 2`` to the half of the bins) the
    middle ``2i + 1`` bins, with the outliers added to the two end bins, are the distribution
    ``p``; merging them into ``num_quantized_bins`` groups and spreading each group's count
    evenly over its non-empty bins gives ``q``; both are smoothed, and the candidate with the
    smallest ``KL(p || q)`` gives the threshold, the upper edge of its last bin.
    """
    arr = np.asarray(arr, dtype=np.float32).reshape(-1)
    if arr.size == 0:
        raise ValueError("QuantizeCalibrate: kl_divergence needs a non-empty sample")
    thres = float(max(abs(float(arr.min())), abs(float(arr.max()))))
    if thres == 0:
        return 0.0
    hist, edges = np.histogram(arr, bins=num_bins, range=(-thres, thres))
    hist = hist.astype(np.int64)
    edges = edges.astype(np.float32)
    zero = num_bins // 2
    half_q = num_quantized_bins // 2
    cumsum = np.concatenate([[0], np.cumsum(hist)])
    best, best_div = None, np.inf
    for i in range(half_q, zero + 1):
        start, stop = zero - i, zero + i + 1
        # Relay folds hist[..start] into the first bin and hist[stop - 1..] into the last one;
        # the sliced histogram that q is made from has an empty first bin
        sliced = hist[start:stop].astype(np.float64)
        sliced[0] = 0
        p = sliced.astype(np.float32)
        p[0] = cumsum[start + 1]
        p[-1] = cumsum[num_bins] - cumsum[stop - 1]
        n = sliced.size
        group = np.minimum(np.arange(n) // (n // num_quantized_bins), num_quantized_bins - 1)
        q_bins = np.bincount(group, weights=sliced, minlength=num_quantized_bins)
        norm = np.bincount(group, weights=(sliced != 0), minlength=num_quantized_bins)
        with np.errstate(divide="ignore", invalid="ignore"):
            level = np.where(norm > 0, q_bins / np.maximum(norm, 1), 0).astype(np.float32)
        q = np.where(p != 0, level[group], np.float32(0)).astype(np.float32)
        ps, qs = _smooth(p), _smooth(q)
        div = np.inf if ps is None or qs is None else _kl(ps, qs)
        if best is None or div < best_div:
            best, best_div = float(edges[stop]), div
    return best


# ---- statistics -------------------------------------------------------------------------------

def _quantize_calls(func: Function) -> list:
    """The simulated_quantize calls of ``func`` still to calibrate (their three scalars are
    parameters of ``func``, as QuantizeAnnotate leaves them; one whose scalars are given already
    keeps them), children first, each once."""
    params = set(func.params)
    return [n for n in post_order(func.body)
            if _is_sq(n) and all(isinstance(a, Var) and a in params for a in n.args[1:])]


class _Identities(ExprMutator):
    """Every simulated_quantize replaced by its data (the float program the stats come from)."""

    def visit_call(self, call):
        if _is_sq(call):
            return self.visit(call.args[0])
        return super().visit_call(call)


def collect_stats(mod: IRModule, calls: list, dataset) -> list:
    """For each call of ``calls`` (simulated_quantize calls of ``mod["main"]``), the values its
    data takes over the data set, flattened and concatenated: a list of float32 arrays.

    The program run is ``@main`` with every simulated_quantize the identity, returning the data
    of each call; it runs on the reference interpreter once per input dict of ``dataset``.
    """
    from ..backends.executor import create_executor
    main = mod["main"]
    mutator = _Identities()
    outputs = [mutator.visit(c.args[0]) for c in calls]
    scalar_params = {a for c in _quantize_calls(main) for a in c.args[1:] if isinstance(a, Var)}
    params = [p for p in main.params if p not in scalar_params]
    names = [p.name_hint for p in params]
    profile = IRModule.from_expr(Function(params, Tuple(outputs)))
    for gv, f in mod.functions.items():
        if gv.name_hint != "main":
            profile[gv] = f
    run = create_executor("interpreter", mod=profile).evaluate()
    samples = [[] for _ in calls]
    count = 0
    for index, batch in enumerate(dataset):
        if not isinstance(batch, dict):
            raise TypeError(f"QuantizeCalibrate: the data set gives input dicts, but item {index} "
                            f"is a {type(batch).__name__}")
        missing = [n for n in names if n not in batch]
        if missing:
            raise ValueError(f"QuantizeCalibrate: item {index} of the data set lacks the input "
                             f"{missing[0]!r} of @main (inputs: {', '.join(names)})")
        values = run(*[batch[n] for n in names])
        if len(calls) == 1 and not isinstance(values, (list, tuple)):
            values = [values]
        for store, value in zip(samples, values):
            store.append(np.asarray(value, dtype=np.float32).reshape(-1))
        count += 1
    if count == 0:
        raise ValueError("QuantizeCalibrate: the data set is empty")
    return [np.concatenate(s) for s in samples]


_MODE_SCALE = {"max": lambda a: max_scale(a), "percentile": find_scale_by_percentile,
               "kl_divergence": find_scale_by_kl}


# ---- the pass ---------------------------------------------------------------------------------

class _SetScalars(ExprMutator):
    """Each simulated_quantize with its three scalars replaced by the calibrated constants."""

    def __init__(self, scalars: dict):
        super().__init__()
        self.scalars = scalars

    def visit_call(self, call):
        new = super().visit_call(call)
        if call in self.scalars:
            return Call(new.op, [new.args[0]] + list(self.scalars[call]), new.attrs, new.type_args)
        return new


def _placeholder_calls(func: Function) -> list:
    """The simulated_quantize calls of a function other than ``@main`` still to calibrate: their
    scalars are the NaN constants QuantizeAnnotate leaves there."""
    return [n for n in post_order(func.body)
            if _is_sq(n) and all(isinstance(a, Constant) and a.data.ndim == 0
                                 and np.isnan(a.data) for a in n.args[1:])]


def _scalars(c, scale: float, cfg) -> tuple:
    kind = QAnnotateKind(c.attrs.kind)
    valid_range = 2.0 ** (cfg.get_nbit_by_kind(kind) - int(c.attrs.sign))
    return (Constant(np.float32(scale / valid_range)), Constant(np.float32(-(valid_range - 1))),
            Constant(np.float32(valid_range - 1)))


def _weight_scale(c, cfg) -> float:
    if not isinstance(c.args[0], Constant):
        raise ValueError("QuantizeCalibrate: a WEIGHT simulated_quantize quantizes "
                         f"{c.args[0].__class__.__name__} {getattr(c.args[0], 'name_hint', '')!s}, "
                         "not a constant; bind the weights (quantize(mod, params)) first")
    return (power2_scale if cfg.weight_scale == "power2" else max_scale)(c.args[0].data)


def _calibrate_other(name: str, func: Function, cfg) -> Function:
    """A function other than ``@main``: its scales from the weights and the global scale (no
    statistics are gathered outside ``@main``)."""
    calls = _placeholder_calls(func)
    if not calls:
        return func
    scalars = {}
    for c in calls:
        kind = QAnnotateKind(c.attrs.kind)
        if kind == QAnnotateKind.WEIGHT:
            scale = _weight_scale(c, cfg)
        elif cfg.calibrate_mode == "global_scale":
            scale = cfg.global_scale
        else:
            raise ValueError(f"QuantizeCalibrate: @{name} quantizes values of its own, and "
                             f"calibrate_mode={cfg.calibrate_mode!r} gathers statistics in @main "
                             f"only; use calibrate_mode='global_scale' for such a module")
        scalars[c] = _scalars(c, scale, cfg)
    body = _SetScalars(scalars).visit(func.body)
    return Function(func.params, body, func.ret_type, func.type_params, func.attrs)


def calibrate_module(mod: IRModule, dataset=None) -> IRModule:
    """``mod`` with the scalars of every simulated_quantize set (see the module): those of
    ``@main`` from the calibrate mode, those of the other functions from the global scale."""
    from ..passes.infra import SKIPPED_FUNCTION_ATTRS, typed
    cfg = current_qconfig()
    mod = typed(mod)
    others = {}
    for gv, func in mod.functions.items():
        if gv.name_hint == "main" or any(func.attrs.get(a) for a in SKIPPED_FUNCTION_ATTRS):
            continue
        new_func = _calibrate_other(gv.name_hint, func, cfg)
        if new_func is not func:
            others[gv] = new_func
    if others:
        mod = typed(mod.with_functions({**mod.functions, **others}))
    main = mod["main"]
    calls = _quantize_calls(main)
    if not calls:
        return mod
    data_calls = [c for c in calls if c.attrs.kind not in (QAnnotateKind.WEIGHT, QAnnotateKind.IDENTITY)]
    scale_of: dict = {}
    if cfg.calibrate_mode == "global_scale":
        for c in data_calls:
            scale_of[c] = cfg.global_scale
    elif data_calls:
        if dataset is None:
            raise ValueError(f"QuantizeCalibrate: calibrate_mode={cfg.calibrate_mode!r} needs a "
                             f"data set (an iterable of input dicts)")
        stats = collect_stats(mod, data_calls, dataset)
        pick = _MODE_SCALE[cfg.calibrate_mode]
        for c, sample in zip(data_calls, stats):
            scale = float(pick(sample))
            scale_of[c] = scale if scale > 0 else 1.0
    scalars: dict = {}
    bound: set = set()
    for c in calls:
        kind = QAnnotateKind(c.attrs.kind)
        if kind == QAnnotateKind.IDENTITY:
            continue
        scale = _weight_scale(c, cfg) if kind == QAnnotateKind.WEIGHT else scale_of[c]
        scalars[c] = _scalars(c, scale, cfg)
        bound.update(a for a in c.args[1:] if isinstance(a, Var))
    body = _SetScalars(scalars).visit(main.body)
    params = [p for p in main.params if p not in bound]
    new = mod.copy()
    new["main"] = Function(params, body, None, main.type_params, main.attrs)
    return new


class _CalibratePass(ModulePass):
    def __repr__(self) -> str:
        return f"<QuantizeCalibrate opt_level={self.info.opt_level}>"


_DOC = "Give every simulated_quantize its scale, from the global scale or a data set."


def QuantizeCalibrate(dataset=None):
    """The pass that sets the scalars of every simulated_quantize (see the module); ``dataset``
    is an iterable of input dicts (needed by the "max", "percentile" and "kl_divergence"
    modes). Its label shows the number of input dicts, not the data."""
    shown = ()
    if dataset is not None:
        if not hasattr(dataset, "__iter__") or isinstance(dataset, dict):
            raise TypeError(f"QuantizeCalibrate: dataset is an iterable of input dicts, not "
                            f"{type(dataset).__name__}")
        dataset = list(dataset)
        shown = (("dataset", f"<{len(dataset)} input dicts>"),)
    info = PassInfo("QuantizeCalibrate", 1, (), _DOC, options=shown, kind="module")
    return _CalibratePass(lambda mod, ctx: calibrate_module(mod, dataset), info)


QuantizeCalibrate.info = PassInfo("QuantizeCalibrate", 1, (), _DOC, kind="module")
register_pass("QuantizeCalibrate", QuantizeCalibrate, 1, (), _DOC, {"dataset": (None, object)})
