"""The picks a user exports by name (``--pick fastest|smallest|most-accurate|balanced``):
each a trial of the feasible Pareto front, chosen on its ratios to the baseline (the
confirmed ones where the trial was confirmed in pairs). Paired confirmation confirms the
picks first."""

from __future__ import annotations

from advisor.core.errors import StudyError
from advisor.core.objectives import DIRECTIONS, Figures
from advisor.core.stored import StoredStudy, TrialRecord

PICKS = ("fastest", "smallest", "most-accurate", "balanced")


def pick(study: StoredStudy, how: str) -> TrialRecord:
    """A trial of the feasible Pareto front.

    fastest: highest throughput; smallest: lowest peak memory; most-accurate: highest
    accuracy; balanced: closest to the ideal point after scaling each objective to [0, 1]
    over the front (ties go to the faster trial).
    """
    if how not in PICKS:
        raise StudyError(f"--pick {how!r} is unknown (expected one of {', '.join(PICKS)})")
    front = study.front()
    if not front:
        raise StudyError(f"study {study.name!r} has no feasible completed trial to pick from")
    # ratios to the baseline, the confirmed ones where a trial was confirmed in pairs
    figures = {r.number: study.relative_figures(r) for r in front}
    if how == "fastest":
        return max(front, key=lambda r: figures[r.number].throughput)
    if how == "smallest":
        return min(front, key=lambda r: figures[r.number].peak_memory_bytes)
    if how == "most-accurate":
        return max(front, key=lambda r: figures[r.number].accuracy)
    points = list(figures.values())
    return min(front, key=lambda r: (_distance_to_ideal(figures[r.number], points), -figures[r.number].throughput))


def _distance_to_ideal(point: Figures, front: list[Figures]) -> float:
    """Distance to the ideal point, each objective scaled to [0, 1] over the front."""
    total = 0.0
    for i, direction in enumerate(DIRECTIONS):
        values = [p[i] for p in front]
        lo, hi = min(values), max(values)
        if hi == lo:
            continue
        score = (point[i] - lo) / (hi - lo)
        if direction == "minimize":
            score = 1.0 - score
        total += (1.0 - score) ** 2
    return total**0.5
