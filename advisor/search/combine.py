"""The default strategy's second step: combinations of the one-knob changes that paid off.

After the seed trials (advisor/search/one_knob.py) each lever's effect alone is known. This step
proposes the ``COMBINATIONS`` combinations with the most promise, predicted from those
effects, before the model of the knobs' effects (advisor/search/effects.py), which also
learns how changes interact, and the sampler take over:

- throughput and peak memory multiply: a combination's predicted ratio to the baseline is
  the product of its parts' ratios;
- the metric does not add up: small numerical changes (bf16, a different memory layout)
  move it within noise, not cumulatively, so a combination is predicted at its worst
  part's metric;
- a change that was faster or smaller but lost too much of the metric alone ("lossy": a
  larger batch at a fixed number of training samples, say) is tried together with changes
  that held the metric, because one may compensate (gradient accumulation keeps a larger
  batch's micro-batches, and so its BatchNorm statistics, at the baseline's size). Its own
  loss of the metric is left out of that prediction: the measurement decides.

Candidates are chosen one at a time by the hypervolume they are predicted to add to the
measured feasible trials (and to the candidates already chosen), so they spread over the
trade-offs instead of crowding at the fastest corner.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from advisor.core.config import TrialConfig
from advisor.core.objectives import Figures, Limits, UnitLoss, best_addition

MAX_MOVES = 10  # the best moves by throughput gain kept when there are more (2^10 subsets)
MARGIN = 0.05  # a move must change throughput or memory by more than this to count, until the noise is measured


@dataclass(frozen=True)
class Move:
    """One knob's value and what it did alone, relative to the baseline."""

    knob: str
    value: object
    speed: float  # throughput ratio
    memory: float  # peak-memory ratio
    metric: float  # the metric's difference (of scores: higher is better)
    lossy: bool  # faster or smaller, but infeasible alone


COMBINATIONS = 2  # combination trials after the seeds; the model of effects (``effects``) goes on from there

def combination_configs(base: TrialConfig, base_figures: Figures,
                        measured: Sequence[tuple[TrialConfig, Figures | None]], limits: Limits, limit: int,
                        allowed: Callable[[TrialConfig], bool],
                        margins: tuple[float, float] = (MARGIN, MARGIN)) -> list[TrialConfig]:
    """The whole step: moves from the one-knob trials in ``measured``, their combinations,
    and the ``limit`` predicted to add the most to the feasible front. ``margins``: how
    much a move must change throughput and memory (relative) to count, from the study's
    measured probe noise."""

    def feasible(f: Figures) -> bool:
        return limits.feasible(f, base_figures[2])

    found = moves(base, base_figures, measured, limits.allowed(base_figures[2]), margins)
    pool = candidates(base, found, base_figures)
    done = [Figures(*base_figures)] + [Figures(*f) for _, f in measured if f is not None]
    return choose(pool, done, limit, feasible, allowed)


def moves(base: TrialConfig, base_figures: Figures, measured: Sequence[tuple[TrialConfig, Figures | None]],
          max_drop: float, margins: tuple[float, float] = (MARGIN, MARGIN)) -> list[Move]:
    """The one-knob changes among ``measured`` that improved throughput or memory beyond
    ``margins`` (relative), or the metric."""
    t0, m0, a0 = base_figures
    found = []
    for config, figures in measured:
        changed = list(config.changed(base))
        if len(changed) != 1 or figures is None:
            continue
        t, m, a = figures
        move = Move(changed[0], getattr(config, changed[0]), t / t0, m / m0, a - a0, a < a0 - max_drop)
        if move.speed > 1 + margins[0] or move.memory < 1 - margins[1] or (move.metric > 0 and not move.lossy):
            found.append(move)
    found.sort(key=lambda mv: -mv.speed)
    return found[:MAX_MOVES]


def candidates(base: TrialConfig, found: Sequence[Move], base_figures: Figures) -> list[tuple[TrialConfig, Figures]]:
    """Every combination of two or more moves on distinct knobs, at most one lossy move,
    with its predicted figures."""
    t0, m0, a0 = base_figures
    out = []
    for size in range(2, len(found) + 1):
        for combo in itertools.combinations(found, size):
            if len({mv.knob for mv in combo}) < size or sum(mv.lossy for mv in combo) > 1:
                continue
            if all(mv.lossy for mv in combo):
                continue
            held = [mv.metric for mv in combo if not mv.lossy]
            figures = Figures(t0 * math.prod(mv.speed for mv in combo), m0 * math.prod(mv.memory for mv in combo),
                              a0 + min(0.0, *held))
            out.append((base.replace(**{mv.knob: mv.value for mv in combo}), figures))
    return out


def choose(candidates: Sequence[tuple[TrialConfig, Figures]], measured: Sequence[Figures], limit: int,
           feasible: Callable[[Figures], bool], allowed: Callable[[TrialConfig], bool]) -> list[TrialConfig]:
    """Up to ``limit`` candidates, each the one predicted to add the most hypervolume to
    the measured feasible figures and the candidates chosen before it."""
    pool = [(c, f) for c, f in candidates if feasible(f) and allowed(c)]
    points = [f for f in measured if feasible(f)]
    if not pool or not points:
        return []
    loss = UnitLoss(points + [f for _, f in pool])
    chosen: list[TrialConfig] = []
    current = [loss(p) for p in points]
    while pool and len(chosen) < limit:
        gain, best = best_addition(current, [loss(f) for _, f in pool])
        if gain <= 0:
            break
        config, figures = pool.pop(best)
        chosen.append(config)
        current.append(loss(figures))
    return chosen
