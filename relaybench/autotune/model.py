"""The cost model and the search over a space: gradient-boosted regression trees trained on the
measurements as they come, and simulated annealing on the model's predictions (AutoTVM's
``XGBTuner``: ``XGBoostCostModel`` plus ``SimulatedAnnealingOptimizer``, in numpy).

The model predicts ``log(1 / seconds)`` of a config from its features
(:meth:`~relaybench.autotune.space.ConfigSpace.features`, plus the pairwise products of the
numeric knobs, which carry a register tile's size). Trees are grown breadth first to a fixed
depth on the residuals of the rounds before them; a space of a few hundred configs and a few
dozen measurements fits in milliseconds.

>>> import numpy as np
>>> x = np.linspace(0, 1, 40)[:, None]
>>> model = GradientBoostedTrees(rounds=30).fit(x, (x[:, 0] > 0.5).astype(float))
>>> np.round(model.predict(np.array([[0.2], [0.8]])), 2)
array([0., 1.])
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["GradientBoostedTrees", "config_features", "anneal"]


class GradientBoostedTrees:
    """Least-squares boosting of depth-limited regression trees."""

    def __init__(self, rounds: int = 40, depth: int = 3, rate: float = 0.3, min_leaf: int = 2):
        self.rounds, self.depth, self.rate, self.min_leaf = rounds, depth, rate, min_leaf
        self.base = 0.0
        self.trees: list = []

    def fit(self, x: np.ndarray, y: np.ndarray) -> "GradientBoostedTrees":
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        self.base = float(y.mean()) if len(y) else 0.0
        self.trees = []
        prediction = np.full(len(y), self.base)
        for _ in range(self.rounds):
            tree = self._grow(x, y - prediction)
            if tree is None:
                break
            self.trees.append(tree)
            prediction += self.rate * _apply(tree, x)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        out = np.full(len(x), self.base)
        for tree in self.trees:
            out += self.rate * _apply(tree, x)
        return out

    def _grow(self, x, residual):
        """One tree as parallel arrays (feature, threshold, left, right, value); grown with an
        explicit queue, one level at a time."""
        feature, threshold, left, right, value = [], [], [], [], []

        def leaf(rows):
            feature.append(-1)
            threshold.append(0.0)
            left.append(-1)
            right.append(-1)
            value.append(float(residual[rows].mean()) if len(rows) else 0.0)
            return len(value) - 1

        root = leaf(np.arange(len(residual)))
        queue = [(root, np.arange(len(residual)), 0)]
        while queue:
            node, rows, level = queue.pop(0)
            if level >= self.depth or len(rows) < 2 * self.min_leaf:
                continue
            split = _best_split(x[rows], residual[rows], self.min_leaf)
            if split is None:
                continue
            f, t = split
            mask = x[rows, f] <= t
            feature[node], threshold[node] = f, t
            left[node] = leaf(rows[mask])
            right[node] = leaf(rows[~mask])
            queue.append((left[node], rows[mask], level + 1))
            queue.append((right[node], rows[~mask], level + 1))
        if len(value) == 1:
            return None
        return (np.array(feature), np.array(threshold), np.array(left), np.array(right),
                np.array(value))


def _best_split(x, r, min_leaf):
    """``(feature, threshold)`` that most reduces the squared error of ``r``, or None."""
    best, best_gain = None, 1e-12
    total, count = r.sum(), len(r)
    for f in range(x.shape[1]):
        order = np.argsort(x[:, f], kind="stable")
        xs, rs = x[order, f], r[order]
        sums = np.cumsum(rs)[:-1]
        n_left = np.arange(1, count)
        ok = (xs[1:] != xs[:-1]) & (n_left >= min_leaf) & (count - n_left >= min_leaf)
        if not ok.any():
            continue
        gain = sums ** 2 / n_left + (total - sums) ** 2 / (count - n_left) - total ** 2 / count
        gain = np.where(ok, gain, -np.inf)
        k = int(np.argmax(gain))
        if gain[k] > best_gain:
            best_gain, best = gain[k], (f, 0.5 * (xs[k] + xs[k + 1]))
    return best


def _apply(tree, x):
    feature, threshold, left, right, value = tree
    node = np.zeros(len(x), dtype=np.int64)
    while True:
        inner = feature[node] >= 0
        if not inner.any():
            return value[node]
        rows = np.nonzero(inner)[0]
        go_left = x[rows, feature[node[rows]]] <= threshold[node[rows]]
        node[rows] = np.where(go_left, left[node[rows]], right[node[rows]])


def config_features(space, config) -> np.ndarray:
    """The model's features of ``config``: the space's own and the pairwise products of its
    numeric knobs (a tile's area, a width times an unroll)."""
    base = space.features(config)
    numeric = [math.log2(max(int(config[k.name]), 1)) for k in space.knobs
               if isinstance(config[k.name], (int, np.integer))
               and not isinstance(config[k.name], bool)]
    pairs = [a + b for i, a in enumerate(numeric) for b in numeric[i + 1:]]
    return np.concatenate([base, np.asarray(pairs, dtype=np.float64)])


def anneal(space, score, rng, count: int, exclude: set, starts: list, chains: int = 16,
           steps: int = 60, temperature: float = 1.0) -> list:
    """Up to ``count`` valid configs (space indices not in ``exclude``) of the highest predicted
    ``score`` found by simulated annealing: ``chains`` walks from ``starts`` (and random configs),
    each step moving one knob, accepted when better or with probability ``exp(gain / T)``, ``T``
    falling linearly to 0."""
    points = list(starts[:chains])
    while len(points) < chains:
        points.append(space.random(rng))
    values = [score(p) for p in points]
    seen: dict = {}
    for p, v in zip(points, values):
        if space.valid(p):
            seen[space.index_of(p)] = v
    for step in range(steps):
        t = temperature * (1 - step / steps) + 1e-9
        for k in range(len(points)):
            candidate = space.neighbours(points[k], rng)
            if not space.valid(candidate):
                continue
            v = score(candidate)
            seen[space.index_of(candidate)] = v
            if v >= values[k] or rng.random() < math.exp((v - values[k]) / t):
                points[k], values[k] = candidate, v
    ranked = sorted((i for i in seen if i not in exclude), key=lambda i: -seen[i])
    return [space.get(i) for i in ranked[:count]]
