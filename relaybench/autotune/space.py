"""Search spaces of the strategies' schedule templates, workloads and configs (AutoTVM's
``ConfigSpace``, ``ConfigEntity`` and workload, in plain Python values).

A *template* is one schedule rule of a strategy that has knobs (``conv2d_NCHWc``,
``depthwise_conv2d_NCHWc`` and ``dense`` of :mod:`relaybench.backends.strategy.x86`). A
*workload* names one instance of it: the template, the anchor's argument shapes and dtypes, its
output and the attributes the loops depend on (strides, padding, dilation, groups, layouts), so
two layers of the same shape share one. A *config* picks one value per knob; the space's default
config is the strategy's hand-picked rule, so an untuned workload compiles as it always did.

>>> space = ConfigSpace("example")
>>> space.define_knob("tile_ow", [1, 2, 4, 7, 14], default=14)
>>> space.define_knob("unroll_rx", [False, True], default=False)
>>> len(space), space.default()
(10, {'tile_ow': 14, 'unroll_rx': False})
>>> space.get(3)
{'tile_ow': 2, 'unroll_rx': True}
>>> space.index_of({'tile_ow': 2, 'unroll_rx': True})
3
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Knob", "ConfigSpace", "Workload", "workload_key"]


@dataclass(frozen=True)
class Knob:
    """One decision of a template: its name, the values it may take, the rule's own choice, and
    a line saying what it changes in the loops."""

    name: str
    values: tuple
    default: object
    doc: str = ""


@dataclass
class ConfigSpace:
    """The knobs of one workload's template, in order; a config is a dict knob -> value.

    Configs are numbered in mixed radix (the last knob varies fastest), so a search can walk the
    space by index; a ``constraint`` (a function of a config, False to exclude it) drops the
    configs that cannot be compiled well (a register tile larger than the register file).
    """

    template: str
    knobs: list = field(default_factory=list)
    constraint: object = None
    #: ``(knob, config)``: a config without that knob was written before it existed, when the
    #: rule's own choices were ``config``; its other missing knobs take their values from there
    #: (see :meth:`complete`). None: a missing knob takes its default
    legacy: object = None

    def define_knob(self, name: str, values, default=None, doc: str = "") -> None:
        values = tuple(dict.fromkeys(values))   # distinct, in order
        if not values:
            raise ValueError(f"{self.template}: knob {name!r} has no values")
        if default is None or default not in values:
            default = values[0] if default is None else _nearest(values, default)
        self.knobs.append(Knob(name, values, default, doc))

    def __len__(self) -> int:
        return int(np.prod([len(k.values) for k in self.knobs], dtype=np.int64)) if self.knobs \
            else 1

    @property
    def names(self) -> list:
        return [k.name for k in self.knobs]

    def default(self) -> dict:
        return {k.name: k.default for k in self.knobs}

    def get(self, index: int) -> dict:
        """The config numbered ``index``."""
        if not 0 <= index < len(self):
            raise IndexError(f"{self.template}: config {index} outside the space of {len(self)}")
        out = {}
        for knob in reversed(self.knobs):
            index, digit = divmod(index, len(knob.values))
            out[knob.name] = knob.values[digit]
        return {k.name: out[k.name] for k in self.knobs}

    def index_of(self, config: dict) -> int:
        index = 0
        for knob in self.knobs:
            index = index * len(knob.values) + knob.values.index(config[knob.name])
        return index

    def valid(self, config: dict) -> bool:
        """Whether ``config`` gives every knob one of its values and meets the constraint."""
        for knob in self.knobs:
            if knob.name not in config or config[knob.name] not in knob.values:
                return False
        return self.constraint is None or bool(self.constraint(config))

    def complete(self, config: dict | None) -> dict:
        """``config`` with the knobs it lacks at their defaults (at the :attr:`legacy` config's
        values when it lacks the legacy knob: it was written before that knob existed) and those
        it gives a value outside the space at their defaults: a log written for an older space
        still applies where it can, as it was measured.

        >>> space = ConfigSpace("example")
        >>> space.define_knob("tile_ow", [2, 4], default=4)
        >>> space.define_knob("tile_oc", [1, 2], default=1)
        >>> space.define_knob("plane", [False, True], default=True)
        >>> space.legacy = ("plane", {"tile_ow": 2, "tile_oc": 2, "plane": False})
        >>> space.complete({"tile_ow": 4}), space.complete({"tile_ow": 3, "plane": True})
        ({'tile_ow': 4, 'tile_oc': 2, 'plane': False}, {'tile_ow': 4, 'tile_oc': 1, 'plane': True})
        """
        config = config or {}
        older = {}
        if self.legacy is not None and self.legacy[0] not in config:
            older = self.legacy[1]
        out = {}
        for knob in self.knobs:
            fallback = older.get(knob.name, knob.default)
            value = config.get(knob.name, fallback)
            out[knob.name] = value if value in knob.values else knob.default
        return out

    def neighbours(self, config: dict, rng) -> dict:
        """``config`` with one knob moved to another of its values (a step of the annealing)."""
        movable = [k for k in self.knobs if len(k.values) > 1]
        if not movable:
            return dict(config)
        knob = movable[rng.integers(len(movable))]
        others = [v for v in knob.values if v != config[knob.name]]
        return {**config, knob.name: others[rng.integers(len(others))]}

    def random(self, rng) -> dict:
        return {k.name: k.values[rng.integers(len(k.values))] for k in self.knobs}

    def features(self, config: dict) -> np.ndarray:
        """Numbers describing ``config`` for the cost model: each knob's value (log2 of numbers,
        0/1 of choices, one column per value of other knobs)."""
        row = []
        for knob in self.knobs:
            value = config[knob.name]
            if isinstance(value, bool):
                row.append(float(value))
            elif isinstance(value, (int, np.integer)):
                row.append(float(np.log2(max(int(value), 1))))
            else:
                row.extend(float(value == v) for v in knob.values)
        return np.asarray(row, dtype=np.float64)

    def table(self):
        """The knobs as a :class:`~relaybench._table.Table` (name, values, default, what it
        changes): aligned text for ``print``, HTML in a notebook."""
        from .._table import Table
        return Table([{"knob": k.name, "values": ", ".join(str(v) for v in k.values),
                       "default": str(k.default), "what it changes": k.doc} for k in self.knobs])

    def __repr__(self) -> str:
        return f"ConfigSpace({self.template}: {', '.join(self.names)}; {len(self)} configs)"


def _nearest(values, default):
    numbers = [v for v in values if isinstance(v, (int, np.integer)) and not isinstance(v, bool)]
    if numbers and isinstance(default, (int, np.integer)):
        return min(numbers, key=lambda v: abs(v - default))
    return values[0]


@dataclass(frozen=True)
class Workload:
    """One tunable instance: ``template`` and its anchor's argument and output shapes, dtypes and
    the attributes the loops depend on (a sorted tuple of ``(name, value)`` pairs)."""

    template: str
    arg_shapes: tuple
    arg_dtypes: tuple
    out_shape: tuple
    out_dtype: str
    attrs: tuple = ()

    @functools.cached_property
    def key(self) -> str:
        return workload_key(self)

    def to_json(self) -> dict:
        return {"template": self.template, "arg_shapes": [list(s) for s in self.arg_shapes],
                "arg_dtypes": list(self.arg_dtypes), "out_shape": list(self.out_shape),
                "out_dtype": self.out_dtype, "attrs": {k: _plain(v) for k, v in self.attrs}}

    @classmethod
    def from_json(cls, data: dict) -> "Workload":
        return cls(data["template"], tuple(tuple(int(d) for d in s) for s in data["arg_shapes"]),
                   tuple(data["arg_dtypes"]), tuple(int(d) for d in data["out_shape"]),
                   data["out_dtype"], tuple(sorted((k, _frozen(v))
                                                   for k, v in data["attrs"].items())))

    @property
    def attr_dict(self) -> dict:
        return dict(self.attrs)

    def __str__(self) -> str:
        shapes = " x ".join("(" + ", ".join(map(str, s)) + ")" for s in self.arg_shapes)
        return f"{self.template} {shapes} -> ({', '.join(map(str, self.out_shape))})"


def _plain(value):
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _frozen(value):
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def workload_key(workload: Workload) -> str:
    """A stable text naming ``workload`` (its JSON with sorted keys): the log's and the
    dispatch's key."""
    return json.dumps(workload.to_json(), sort_keys=True, separators=(",", ":"))
