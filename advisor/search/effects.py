"""The default strategy's third step: proposals from a model of the knobs' effects.

After the one-knob seeds and their combinations (``one_knob``, ``combine``), each further
proposal of the default strategy comes, three times in four, from a model fitted to every
configuration measured so far; the sampler (TPE) makes the rest, for what the model cannot
see (``advisor.search.strategy``).

**The model.** A configuration is the set of its *changes*: the (knob, value) pairs where
it differs from the baseline. Its log-throughput ratio and log-peak-memory ratio to the
baseline are each modelled as a sum of one effect per change plus one interaction per
pair of changes, every effect with a Gaussian prior: mean 0 (or a known rule's, below),
standard deviation ``MAIN_SD`` for a change and ``PAIR_SD`` for a pair. Measurements add
Gaussian noise of the study's own probe noise. The posterior is computed in its dual form,
a Gaussian process whose kernel counts the changes (and pairs) two configurations share,
so an effect never measured keeps its prior and adds its uncertainty to every prediction
that needs it. The interactions are learnt from the combinations measured.

**Known rules as priors** (``PRIOR``): peak memory grows with the batch size (half its
log-ratio: activations grow, weights and optimizer state do not) and shrinks with
gradient accumulation (the micro-batch is the batch divided by it).

**The metric** is not modelled: a change that held the metric wherever it was measured is
predicted to hold it, at the worst change's measured loss; a change that lost too much
of it everywhere it was measured ("lossy") rules a candidate out, unless some measured
configuration with it was feasible (another change compensated).

**The choice** (``propose``) is, among the candidates predicted feasible (a memory cap
is judged on the mean prediction), the one whose optimistic prediction (each ratio
``KAPPA`` standard deviations towards better) adds the most hypervolume to the measured
feasible trials and to the configurations still running (taken at their predicted means),
as SMS-EGO does with a lower confidence bound. Candidates: every one-knob change of each
configuration on the measured front (the baseline included), the union of the changes of
each two of them, and ``RANDOM_CANDIDATES`` of them with changes measured elsewhere (and
one knob drawn at random). A candidate brings at most ``MAX_NEW`` change never measured:
an unmeasured change is uncertain by its whole prior, and a configuration of many of them
would look best for its uncertainty alone (the first try of this model, in README
command 1, proposed DDP, pruning, compile and four more changes at once).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from advisor.core.config import TrialConfig
from advisor.core.errors import ConfigError
from advisor.core.objectives import Figures, Limits, UnitLoss, best_addition, pareto_front

if TYPE_CHECKING:
    from advisor.search.space import SearchSpace

MAIN_SD = 0.5  # prior spread of one change's effect, natural log (about x0.6 to x1.65)
PAIR_SD = 0.15  # prior spread of an interaction of two changes
KAPPA = 0.5  # standard deviations of optimism when a candidate is chosen
MIN_NOISE_SD = 0.01  # the smallest measurement noise assumed, natural log
RANDOM_CANDIDATES = 100
MAX_NEW = 1  # changes never measured that one candidate may bring: one unknown at a time
MAX_FIT = 150  # measurements the model is fitted to, at most: the one-knob ones, the front, the latest
MAX_PARENTS = 8  # front configurations whose neighbours and unions are candidates: the baseline, the
# fastest, the smallest and the best-metric ones
Change = tuple[str, str]  # a knob and its value (as JSON)

# knob -> (log-throughput slope, log-memory slope) against the log of the value's ratio to the baseline's
PRIOR: dict[str, tuple[float, float]] = {"batch_size": (0.0, 0.5), "grad_accumulation": (0.0, -0.5)}


def changes_of(config: TrialConfig, base: TrialConfig, knobs: Sequence[str]) -> frozenset[Change]:
    """The (knob, value) pairs of ``knobs`` where ``config`` differs from ``base``."""
    return frozenset((k, json.dumps(v)) for k, v in config.changed(base, knobs).items())


@dataclass(frozen=True)
class Prediction:
    """A configuration's predicted log-ratios to the baseline, with their standard deviations."""

    log_speed: float
    speed_sd: float
    log_memory: float
    memory_sd: float


class EffectsModel:
    """The Bayesian additive model with pairwise interactions, fitted to ``measured``:
    (configuration, throughput ratio, memory ratio) to the baseline ``base`` (which
    ``propose`` always includes, so the fit is never empty)."""

    def __init__(self, base: TrialConfig, knobs: Sequence[str], measured: Sequence[tuple[TrialConfig, float, float]],
                 noise_sd: tuple[float, float]) -> None:
        import numpy as np

        self.base, self.knobs = base, tuple(knobs)
        self._x = [changes_of(c, base, self.knobs) for c, _, _ in measured]
        self._pairs = [_pairs(x) for x in self._x]
        k = np.array([[self._k(a, pa, b, pb) for b, pb in zip(self._x, self._pairs)]
                      for a, pa in zip(self._x, self._pairs)]).reshape(len(self._x), len(self._x))
        self._alpha, self._inverse = [], []
        for i, sd in enumerate(noise_sd):
            y = np.array([math.log(speed if i == 0 else memory) - self._prior(x, i)
                          for (_, speed, memory), x in zip(measured, self._x)])
            inverse = np.linalg.inv(k + max(sd, MIN_NOISE_SD) ** 2 * np.eye(len(self._x)))
            self._inverse.append(inverse)
            self._alpha.append(inverse @ y)

    def predict(self, config: TrialConfig) -> Prediction:
        import numpy as np

        x = changes_of(config, self.base, self.knobs)
        px = _pairs(x)
        ks = np.array([self._k(x, px, b, pb) for b, pb in zip(self._x, self._pairs)])
        prior_var = MAIN_SD ** 2 * len(x) + PAIR_SD ** 2 * len(px)
        out = []
        for i in range(2):
            mean = self._prior(x, i) + float(ks @ self._alpha[i])
            var = prior_var - float(ks @ self._inverse[i] @ ks)
            out.append((mean, math.sqrt(max(var, 0.0))))
        return Prediction(out[0][0], out[0][1], out[1][0], out[1][1])

    @staticmethod
    def _k(a: frozenset[Change], pa: frozenset[Any], b: frozenset[Change], pb: frozenset[Any]) -> float:
        return MAIN_SD ** 2 * len(a & b) + PAIR_SD ** 2 * len(pa & pb)

    def _prior(self, x: frozenset[Change], i: int) -> float:
        total = 0.0
        for knob, value in x:
            slopes = PRIOR.get(knob)
            if slopes is None:
                continue
            v, b = json.loads(value), getattr(self.base, knob)
            if isinstance(v, int) and isinstance(b, int) and v > 0 and b > 0:
                total += slopes[i] * math.log(v / b)
        return total


def _pairs(x: frozenset[Change]) -> frozenset[tuple[Change, Change]]:
    ordered = sorted(x)
    return frozenset((a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:])


def propose(space: SearchSpace, base: TrialConfig, base_figures: Figures,
            measured: Sequence[tuple[TrialConfig, Figures, bool]], running: Sequence[TrialConfig], limits: Limits,
            noise_sd: tuple[float, float], allowed: Callable[[TrialConfig], bool], rng: random.Random,
            neighbours: Callable[[TrialConfig], list[TrialConfig]]) -> TrialConfig | None:
    """The next configuration to measure, or None when no candidate is predicted to add
    to the front.

    Args:
        measured: every configuration with its figures (the throughput rescaled to the
            baseline's reference) and whether its metric was measured (a probed-only one's
            score is the baseline's, not a measurement).
        running: configurations proposed and not yet measured (taken at their predictions).
        noise_sd: the probes' noise (throughput, memory), one measurement's log standard deviation.
        allowed: whether a configuration may be proposed (not seen, not refused).
        neighbours: a configuration's one-knob changes within the space.
    """
    t0, m0, s0 = base_figures
    if not (t0 > 0 and m0 > 0):  # nothing to take ratios to (a CPU peak can read 0)
        return None
    measured = [(c, f, scored) for c, f, scored in measured if f.throughput > 0 and f.peak_memory_bytes > 0]
    knobs = [k.name for k in space.knobs]
    metric = _MetricRule(base, knobs, s0, limits.allowed(s0), measured)
    feasible = [(c, f) for c, f, _ in measured if limits.feasible(f, s0)]
    front = pareto_front(feasible, lambda r: r[1])
    rows = [(c, f.throughput / t0, f.peak_memory_bytes / m0) for c, f in _fitted(measured, front, base, knobs)]
    model = EffectsModel(base, knobs, [(base, 1.0, 1.0), *rows], noise_sd)
    known = frozenset().union(*(changes_of(c, base, knobs) for c, _, _ in measured))
    pool = [space.as_sampled(c) for c in _candidates(space, base, [base, *_parents(front)], known, knobs, rng,
                                                      neighbours)]
    pool = [c for c in pool if len(changes_of(c, base, knobs) - known) <= MAX_NEW and allowed(c)
            and metric.score(c) is not None]
    if not pool:
        return None

    def figures(c: TrialConfig) -> tuple[Figures, Figures]:
        """``c``'s predicted figures: the mean, and ``KAPPA`` standard deviations towards better."""
        p, score = model.predict(c), metric.score(c)
        s = s0 if score is None else score
        return (Figures(t0 * math.exp(p.log_speed), m0 * math.exp(p.log_memory), s),
                Figures(t0 * math.exp(p.log_speed + KAPPA * p.speed_sd),
                        m0 * math.exp(p.log_memory - KAPPA * p.memory_sd), s))

    points = [f for _, f in feasible] + [f for f in [Figures(*base_figures)] + [figures(c)[0] for c in running]
                                         if limits.feasible(f, s0)]
    # feasible as predicted (a memory cap on the mean prediction), scored optimistically
    predicted = [(c, *figures(c)) for c in pool]
    options = [(c, optimistic) for c, mean, optimistic in predicted if limits.feasible(mean, s0)]
    if not options:
        return None
    loss = UnitLoss([*points, *(f for _, f in options)], log=True)
    now = [loss(p) for p in pareto_front(points, lambda f: f)]
    gain, best = best_addition(now, [loss(f) for _, f in options])
    return options[best][0] if gain > 0 else None


def _fitted(measured: Sequence[tuple[TrialConfig, Figures, bool]], front: Sequence[tuple[TrialConfig, Figures]],
            base: TrialConfig, knobs: Sequence[str]) -> list[tuple[TrialConfig, Figures]]:
    """What the model is fitted to: every measurement, or in a long study ``MAX_FIT``: the
    one-knob ones (each effect alone), the front, then the latest."""
    rows = [(c, f) for c, f, _ in measured]
    if len(rows) <= MAX_FIT:
        return rows
    on_front = {c.key() for c, _ in front}
    chosen = [len(changes_of(c, base, knobs)) == 1 or c.key() in on_front for c, _ in rows]
    first = [r for r, keep in zip(rows, chosen) if keep]
    rest = [r for r, keep in zip(rows, chosen) if not keep]
    return (first + rest[len(rest) - max(0, MAX_FIT - len(first)):])[:MAX_FIT]


def _parents(front: Sequence[tuple[TrialConfig, Figures]]) -> list[TrialConfig]:
    """Up to ``MAX_PARENTS - 1`` configurations of the front: the fastest, the smallest and
    the best-metric ones, in turn."""
    orders = [sorted(front, key=lambda r: -r[1].throughput), sorted(front, key=lambda r: r[1].peak_memory_bytes),
              sorted(front, key=lambda r: -r[1].score)]
    chosen: dict[str, TrialConfig] = {}
    for rank in range(len(front)):
        for order in orders:
            if len(chosen) < MAX_PARENTS - 1:
                chosen.setdefault(order[rank][0].key(), order[rank][0])
    return list(chosen.values())


class _MetricRule:
    """The metric a candidate is predicted at, from the changes measured (None: ruled out)."""

    def __init__(self, base: TrialConfig, knobs: Sequence[str], s0: float, max_drop: float,
                 measured: Sequence[tuple[TrialConfig, Figures, bool]]) -> None:
        self.base, self.knobs, self.s0 = base, knobs, s0
        self.alone: dict[Change, float] = {}  # the metric's change where the change was measured alone
        held: set[Change] = set()
        seen: set[Change] = set()
        for config, f, scored in measured:
            if not scored:
                continue
            x = changes_of(config, base, knobs)
            seen |= x
            if f.score >= s0 - max_drop:
                held |= x
            if len(x) == 1:
                self.alone[next(iter(x))] = f.score - s0
        self.lossy = seen - held

    def score(self, config: TrialConfig) -> float | None:
        x = changes_of(config, self.base, self.knobs)
        if x & self.lossy:
            return None
        return self.s0 + min([0.0, *(self.alone.get(c, 0.0) for c in x)])


def _candidates(space: SearchSpace, base: TrialConfig, front: Sequence[TrialConfig], known: frozenset[Change],
                knobs: Sequence[str], rng: random.Random,
                neighbours: Callable[[TrialConfig], list[TrialConfig]]) -> list[TrialConfig]:
    """Each parent's one-knob changes, the union of each two parents' changes, and
    ``RANDOM_CANDIDATES`` parents with one to three of the changes measured so far, half
    of them with one knob of the space drawn at random as well."""
    out: dict[str, TrialConfig] = {}
    for c in front:
        for n in neighbours(c):
            out.setdefault(n.key(), n)
    for i, a in enumerate(front):
        for b in front[i + 1:]:
            try:
                merged = a.replace(**b.changed(base, knobs))
            except ConfigError:  # values that cannot go together
                continue
            out.setdefault(merged.key(), merged)
    moves = sorted(known)
    for _ in range(RANDOM_CANDIDATES if moves else 0):
        changes = dict((k, json.loads(v)) for k, v in rng.sample(moves, min(len(moves), rng.randint(1, 3))))
        if rng.random() < 0.5:  # and one knob at random (one whose condition fails is reset by as_sampled)
            knob = rng.choice(space.knobs)
            changes[knob.name] = rng.choice(knob.choices)
        try:
            c = rng.choice(front).replace(**changes)
        except ConfigError:
            continue
        out.setdefault(c.key(), c)
    return list(out.values())
