"""The picks a user exports by name (``--pick fastest|smallest|best-metric|balanced``):
each a trial of the feasible Pareto front, chosen on its ratios to the baseline.

Picks are made on confirmed figures: once any trial of the front is confirmed in pairs,
only the confirmed ones (and the baseline) are picked from, so an unconfirmed single
reading never beats a confirmed interval. Figures that the noise cannot tell apart are
ties: confirmed intervals that overlap the best one's (a CPU's single memory reading spans
the resident floor, as a confirmed interval does) unless another trial, or the baseline,
beats them beyond the noise, balanced distances within the
intervals' reach, and metrics whose difference from the best one's the verdicts' bounds do
not tell from 0 (``StoredStudy.metric_tie``). A tie goes to the configuration that changes
fewer knobs from the baseline, then to the one with less memory (the faster one, for
``smallest`` and ``best-metric``).
Paired confirmation confirms the picks first (``advisor.study.confirmation.confirm``). ``most-accurate``
is ``best-metric``'s older name, still taken."""

from __future__ import annotations

import math
from collections.abc import Callable

from advisor.core.errors import StudyError
from advisor.core.objectives import DIRECTIONS, METRIC, Figures, Versus
from advisor.core.pairs import RESIDENT_FLOOR
from advisor.core.stored import StoredStudy, TrialRecord

PICKS = ("fastest", "smallest", "best-metric", "balanced")
OLDER_PICKS = {"most-accurate": "best-metric"}  # deprecated names, still taken


def pick(study: StoredStudy, how: str) -> TrialRecord:
    """A trial of the feasible Pareto front.

    fastest: highest throughput ratio; smallest: lowest peak memory ratio; best-metric:
    the best metric (its direction); balanced: closest to the ideal point after scaling each objective to
    [0, 1] over the front (the metric only where it spreads beyond its noise); a trial whose
    intervals reach as near as the closest one's reach far ties with it. Ties as the module
    says (for balanced, as for fastest: fewer knobs, then less memory).
    """
    how = OLDER_PICKS.get(how, how)
    if how not in PICKS:
        raise StudyError(f"--pick {how!r} is unknown (expected one of {', '.join(PICKS)})")
    if not study.front():
        raise StudyError(f"study {study.name!r} has no feasible completed trial to pick from")
    pool, versus, figures = _pool(study)
    changed = _changed_knobs(study)

    def tie_break(memory_first: bool) -> Callable[[TrialRecord], tuple[float, ...]]:
        def key(r: TrialRecord) -> tuple[float, ...]:
            f = figures[r.number]
            return ((changed(r), f.peak_memory_bytes, -f.throughput) if memory_first
                    else (changed(r), -f.throughput, f.peak_memory_bytes))
        return key

    if how == "fastest":
        span = {r.number: _span(versus[r.number].throughput_interval, figures[r.number].throughput) for r in pool}
        best = max(pool, key=lambda r: figures[r.number].throughput)
        ties = [r for r in pool if span[r.number][1] >= span[best.number][0]]
        return min(_unbeaten(ties, span, pool, higher=True), key=tie_break(memory_first=True))
    if how == "smallest":
        floor = _resident_floor(study)
        span = {r.number: _span(versus[r.number].memory_interval, figures[r.number].peak_memory_bytes,
                                0.0 if r.baseline else floor) for r in pool}
        best = min(pool, key=lambda r: figures[r.number].peak_memory_bytes)
        ties = [r for r in pool if span[r.number][0] <= span[best.number][1]]
        return min(_unbeaten(ties, span, pool, higher=False), key=tie_break(memory_first=False))
    if how == "best-metric":
        top = max(pool, key=lambda r: figures[r.number].score)
        ties = [r for r in pool if study.metric_tie(top, r)]
        return min(ties, key=tie_break(memory_first=False))
    scale = _Scale(list(figures.values()), study.epsilon, _resident_floor(study))
    best = _nearest(pool, figures, scale, changed)
    reach = {r.number: scale.reach(figures[r.number], versus[r.number]) for r in pool}
    ties = [r for r in pool if reach[r.number][0] <= reach[best.number][1]]
    return min(ties, key=tie_break(memory_first=True))


def tie_note(study: StoredStudy, how: str, chosen: TrialRecord) -> str:
    """Why ``chosen`` is the ``how`` pick although another trial reads better on that pick's
    own figure: the noise cannot tell them apart (a tie, broken as the module says); '' when
    ``chosen`` reads best itself. A review saw "fastest: trial 0 (1.00x)" beside a front whose
    trial 2 read 1.49x (1.00-2.23), with nothing to say why."""
    rival = tie_rival(study, how, chosen)
    if rival is None:
        return ""
    best, what = rival
    changed = _changed_knobs(study)
    if changed(chosen) < changed(best):
        rule = f"the configuration that changes fewer knobs{' (here the baseline itself)' if chosen.baseline else ''}"
    else:  # as many knobs changed (a review read "fewer knobs" of two one-knob changes): what decided it
        then = "less memory" if OLDER_PICKS.get(how, how) in ("fastest", "balanced") else "more throughput"
        rule = f"the configuration that changes fewer knobs, and between as many, to the one with {then}"
    return f"trial {best.number} reads {what} but not beyond the noise, so they tie; a tie goes to {rule}"


def tie_rival(study: StoredStudy, how: str, chosen: TrialRecord) -> tuple[TrialRecord, str] | None:
    """The trial that reads better than ``chosen`` on the ``how`` pick's own figure, with that
    figure in words ('faster (throughput 1.52x (...))'); None when ``chosen`` reads best."""
    how = OLDER_PICKS.get(how, how)
    if how not in PICKS:
        return None
    pool, versus, figures = _pool(study)
    if chosen.number not in figures:
        return None
    if how == "balanced":
        best = _nearest(pool, figures, _Scale(list(figures.values()), study.epsilon, _resident_floor(study)), _changed_knobs(study))
        if best.number == chosen.number:
            return None
        vs = versus[best.number]
        return best, (f"nearer the balanced point (throughput {vs.throughput_text()}, peak memory "
                      f"{vs.memory_text()})")
    if how == "fastest":
        best = max(pool, key=lambda r: figures[r.number].throughput)
        what = f"faster (throughput {versus[best.number].throughput_text()})"
    elif how == "smallest":
        best = min(pool, key=lambda r: figures[r.number].peak_memory_bytes)
        what = f"smaller (peak memory {versus[best.number].memory_text()})"
    else:
        best = max(pool, key=lambda r: figures[r.number].score)
        what = f"better ({study.metric.name} {study.metric.value_text(figures[best.number].score)})"
    if best.number == chosen.number or figures[best.number][_INDEX[how]] == figures[chosen.number][_INDEX[how]]:
        return None
    return best, what


_INDEX = {"fastest": 0, "smallest": 1, "best-metric": 2}  # the pick's own figure in Figures
_MEMORY = _INDEX["smallest"]


def _pool(study: StoredStudy) -> tuple[list[TrialRecord], dict[int, Versus], dict[int, Figures]]:
    """What the picks choose from: the front's confirmed trials and the baseline (the whole
    front while nothing is confirmed), with each front trial against the baseline and each
    pooled trial's figures relative to it."""
    front = study.front()
    versus = {r.number: study.versus_baseline(r) for r in front}
    pool = [r for r in front if versus[r.number].confirmed or r.baseline]
    if not any(versus[r.number].confirmed for r in pool):
        pool = front  # nothing confirmed yet: the single readings are all there is
    return pool, versus, {r.number: study.relative_figures(r) for r in pool}


def _unbeaten(ties: list[TrialRecord], span: dict[int, tuple[float, float]], pool: list[TrialRecord],
              higher: bool) -> list[TrialRecord]:
    """The tied trials that no pooled trial, nor the baseline, beats beyond the noise: a tie is
    with the best reading, but a trial whose whole interval lies below another's (or below the
    baseline's 1.00x, on the front or not: the pairs' ratios are to it) is not among the
    best, as confirmation's settling says (``Confirmation.settled``: "not the fastest"). A
    review's README command 1 picked, as fastest, a 0.86x (0.78-0.95) configuration: it
    reached the 1.14x (0.92-1.41) one's interval and held less memory. ``higher``: higher is
    better (throughput), else lower (memory). The best reading is never beaten by the pool; where
    the baseline beats every tied trial, the tie stands as it is."""
    sign = 1.0 if higher else -1.0
    signed = {r.number: sorted(sign * x for x in span[r.number]) for r in pool}  # [worst, best], higher better
    bar = max([low for low, _ in signed.values()] + [sign])
    return [r for r in ties if signed[r.number][1] >= bar] or ties


def _span(interval: tuple[float, float] | None, value: float, floor: float = 0.0) -> tuple[float, float]:
    """A figure's confirmed 95% interval, or the single reading as a point (widened by
    ``floor``, a log half-width, where one is known for single readings)."""
    return interval if interval is not None else (value * math.exp(-floor), value * math.exp(floor))


def _resident_floor(study: StoredStudy) -> float:
    """The least log half-width of a CPU trial's memory ratio (``RESIDENT_FLOOR``: resident
    peaks move between processes by about +-16%), for its single reading as for a confirmed
    interval; 0 for a GPU's allocator peaks. A review read `smallest trial 1` at 0.98x
    unconfirmed, no tie said, where the README calls such differences noise."""
    settings = study.attrs.get("settings")
    device = settings.get("device", "cpu") if isinstance(settings, dict) else "cpu"
    return RESIDENT_FLOOR if device == "cpu" else 0.0


def _changed_knobs(study: StoredStudy) -> Callable[[TrialRecord], int]:
    """How many knobs a trial's configuration changes from the baseline's."""
    base = study.baseline.config.to_dict() if study.baseline is not None and study.baseline.config else {}

    def count(r: TrialRecord) -> int:
        config = r.config.to_dict() if r.config is not None else {}
        return sum(1 for k, v in config.items() if k in base and base[k] != v)
    return count


def _nearest(pool: list[TrialRecord], figures: dict[int, Figures], scale: _Scale,
             changed: Callable[[TrialRecord], int]) -> TrialRecord:
    """The pooled trial whose figures lie nearest the ideal point of ``scale`` (ties on the
    figures themselves: fewer knobs changed, then more throughput)."""
    return min(pool, key=lambda r: (scale.distance(figures[r.number]), changed(r), -figures[r.number].throughput))


class _Scale:
    """Each objective scaled to [0, 1] over the pooled trials' figures, 1 the best; the
    metric only where it spreads more than its noise (``epsilon``), the peak memory only
    where it spreads more than a CPU's resident peaks move between processes
    (``memory_floor``, a log half-width: min-max scaling gave a spread within that noise the
    full weight; trust.py's second study's balanced pick was a 0.77x configuration chosen on
    its lower memory, by how much not recorded)."""

    def __init__(self, points: list[Figures], epsilon: float = 0.0, memory_floor: float = 0.0) -> None:
        self.ranges: dict[int, tuple[float, float]] = {}
        for i in range(len(DIRECTIONS)):
            values = [p[i] for p in points]
            lo, hi = min(values), max(values)
            noise = (i == METRIC and hi - lo <= epsilon) or (
                i == _MEMORY and memory_floor > 0 and lo > 0 and math.log(hi / lo) <= memory_floor)
            if hi > lo and not noise:
                self.ranges[i] = (lo, hi)

    def score(self, i: int, value: float) -> float:
        lo, hi = self.ranges[i]
        score = min(1.0, max(0.0, (value - lo) / (hi - lo)))
        return 1.0 - score if DIRECTIONS[i] == "minimize" else score

    def distance(self, point: Figures, ends: dict[int, float] | None = None) -> float:
        """Distance to the ideal point (1 on every scaled objective), ``ends`` replacing some of
        ``point``'s figures."""
        ends = ends or {}
        return sum((1.0 - self.score(i, ends.get(i, point[i]))) ** 2 for i in self.ranges) ** 0.5

    def reach(self, point: Figures, versus: Versus) -> tuple[float, float]:
        """The nearest and farthest the trial can lie from the ideal point within its confirmed
        95% intervals (a single reading: its figures, both ways)."""
        thr, mem = versus.throughput_interval, versus.memory_interval
        best = {0: thr[1]} if thr else {}
        worst = {0: thr[0]} if thr else {}
        if mem:
            best[1], worst[1] = mem[0], mem[1]
        return self.distance(point, best), self.distance(point, worst)

