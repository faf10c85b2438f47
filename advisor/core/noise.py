"""The noise rules a study applies, as plain arithmetic.

**The machine's noise (the sentinel).** Every trial process times a fixed kernel just
before and after its measured region (``advisor.machine.sentinel``). ``SentinelJudge``
keeps the study's recent readings: a reading slower than their median by more than
``DISTURBED_AT`` shows a disturbed machine (a faster one never does); when the median
itself moves that far (either way) from where it was at the last baseline measurement,
the machine drifted and the baseline is measured again. Whether a *trial* runs again is
decided from the interference inside its timed blocks (``advisor.core.interference``);
the sentinel's own before-and-after readings decide only where those counters cannot be
read (``moved_unscored``), and its reading against the study's median judges
confirmation's runs beside them (``advisor.study.confirmation.pairing``).

**The baseline's reference.** Each ratio is to the median of the baseline's ``RECENT``
latest measurements (trial 0 and its re-measurements) taken by the time the figure was
measured, never to one probe: after readings 1.0, 0.73, 1.0 the reference is 1.0
(``recent_reference``). A measurement taken later never changes a figure's reference, so
the ratio ``advisor tune`` printed when the trial finished is the one every later reader
(the explorer, ``--json``, the export) shows. The search's own decisions (which
combinations to try, the model of the knobs' effects) may look both ways: they take the
median of the ``RECENT`` measurements nearest in time to the figure, later ones included
(``nearest_reference``), so that one probe of the baseline that read fast or slow does not
shift every one-knob seed measured before the baseline was measured again.

**The metric's noise (seed to seed).** The baseline is trained with ``NOISE_SEEDS``
seeds; ``epsilon`` = 2 x their standard deviation. A difference in the metric within
epsilon is "within noise": the front does not let it decide dominance, and displays say so.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from advisor.core.interference import block_scores, summary_of

DISTURBED_AT = 1.3  # a sentinel reading 30% off the study's median: a disturbed machine
WINDOW = 15  # the median is over the last WINDOW readings (a lasting change moves it)
MIN_READINGS = 3  # no verdict before the study has this many readings
RECENT = 3  # the baseline's reference is the median of its RECENT latest measurements by then
NOISE_SEEDS = 3  # the baseline trained with this many seeds (the first is trial 0)
EPSILON_SDS = 2.0  # epsilon = EPSILON_SDS x the seed-to-seed standard deviation


def reading_of(telemetry: dict[str, Any] | None) -> float | None:
    """A trial's sentinel reading, seconds (None if absent): the geometric mean of before
    and after, so that one reading's hiccup counts half while a disturbance that spans the
    trial counts fully."""
    sentinel = (telemetry or {}).get("sentinel")
    if not isinstance(sentinel, dict):
        return None
    values = [v for v in (sentinel.get("before_s"), sentinel.get("after_s")) if isinstance(v, (int, float)) and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


BUSY_SCORE = 0.25  # timed blocks that lost a quarter of their time to other work (median): a busy machine


def sentinel_moved(telemetry: dict[str, Any] | None) -> str | None:
    """Why a run's sentinel says the machine changed while it ran (read more than
    ``DISTURBED_AT`` apart before and after its timed steps); None otherwise, and when not
    measured. Relative to the run itself: a machine busy alike throughout does not move it."""
    sentinel = (telemetry or {}).get("sentinel")
    if isinstance(sentinel, dict):
        before, after = sentinel.get("before_s"), sentinel.get("after_s")
        if isinstance(before, (int, float)) and isinstance(after, (int, float)) and before > 0 and after > 0:
            factor = off_by(before, after)
            if factor > DISTURBED_AT:
                return (f"the noise sentinel read {1e3 * before:.1f} ms before its timed steps and "
                        f"{1e3 * after:.1f} ms after ({factor:.1f}x apart, the limit is {DISTURBED_AT:.2f}x): "
                        "the machine changed while it ran")
    return None


def moved_unscored(telemetry: dict[str, Any] | None) -> str | None:
    """``sentinel_moved``, for a run whose timed blocks were not scored (no interference
    counters): where they were, they say what disturbed the timed steps themselves, and the
    sentinel's readings at either end say less. On a quiet 2-core machine 6 of 40 probes of
    digits_cnn read 1.30-1.43x apart, every one slower *before* its steps (a fresh process
    warming up), at a median 1.06x the others' throughput; beside a bursty neighbour, 2.7x
    and 6.3x apart with every block clean and throughput at the median
    (``benchmarks/sentinel.py``, ``results/sentinel_cnn.json``). Confirmation ran each such
    run again: 9-12 in each README command 1."""
    return None if block_scores(telemetry) else sentinel_moved(telemetry)


def disturbed_alone(telemetry: dict[str, Any] | None) -> str | None:
    """Why one run shows a disturbed machine by its own readings, with nothing of the study
    to compare it with (the study's first run: its baseline): its timed blocks lost a median
    of over ``BUSY_SCORE`` of their time waiting for a CPU or stolen (unless its own threads
    and workers outnumber its CPUs: then it waits of its own doing), or, where no block was
    scored, its sentinel read more than ``DISTURBED_AT`` apart before and after its timed
    steps (``moved_unscored``); None otherwise, and when not measured. (A baseline run beside
    another busy process read 655 samples/s, 190x slower than the same configuration a minute
    later: every block lost half its time, and its sentinel read 1,792 ms before and 10.6 ms after.)"""
    moved = moved_unscored(telemetry)
    if moved:
        return moved
    summary = summary_of(telemetry) or {}
    scores = block_scores(telemetry)
    median = statistics.median(scores) if scores else 0.0
    if median > BUSY_SCORE and not summary.get("self_contended"):
        return (f"its timed blocks lost a median {100 * median:.0f}% of their time to other "
                f"work (waiting for a CPU, or stolen; over {100 * BUSY_SCORE:.0f}% is a busy machine)")
    return None


def off_by(value: float, reference: float) -> float:
    """How far ``value`` is from ``reference`` as a factor >= 1 (1.3: 30% off, either way)."""
    return math.exp(abs(math.log(value / reference)))


class SentinelJudge:
    """The study's recent sentinel readings and the verdicts drawn from them."""

    def __init__(self, readings: Iterable[float] = (), threshold: float = DISTURBED_AT) -> None:
        self.readings: deque[float] = deque(readings, maxlen=WINDOW)
        self.threshold = threshold

    def add(self, reading: float | None) -> None:
        if reading is not None:
            self.readings.append(reading)

    @property
    def median(self) -> float | None:
        """The median of the recent readings, or None before ``MIN_READINGS``."""
        return statistics.median(self.readings) if len(self.readings) >= MIN_READINGS else None

    def disturbed(self, reading: float | None) -> str | None:
        """Why ``reading`` shows a disturbed machine (slower than the median by more than
        the threshold; a faster machine is never disturbed), or None (also when it cannot
        tell)."""
        median = self.median
        if reading is None or median is None or reading <= median:
            return None
        factor = reading / median
        if factor <= self.threshold:
            return None
        return (f"the noise sentinel read {1e3 * reading:.1f} ms against the study's median {1e3 * median:.1f} ms "
                f"({factor:.2f}x slower, the limit is {self.threshold:.2f}x): the machine was disturbed")

    def drifted(self, since: float | None) -> bool:
        """Whether the median moved more than the threshold from ``since`` (a reading)."""
        median = self.median
        return since is not None and median is not None and off_by(median, since) > self.threshold


def recent_reference(measurements: list[tuple[float, float]], when: float | None = None) -> float | None:
    """The baseline's reference throughput at ``when``: the median of the ``RECENT``
    latest measurements ``(at, throughput)`` taken by then (the latest of all when ``when``
    is None); None without any by then (never one taken later: what was printed then stands)."""
    ordered = sorted(measurements)
    if when is not None:
        ordered = [m for m in ordered if m[0] <= when]
    return statistics.median(m[1] for m in ordered[-RECENT:]) if ordered else None


def nearest_reference(measurements: list[tuple[float, float]], when: float) -> float | None:
    """The baseline's reference for a decision about a figure measured at ``when``: the
    median of the ``RECENT`` measurements ``(at, throughput)`` nearest to it in time, before
    or after (ties to the earlier); None without any.

    Example:
        >>> nearest_reference([(0.0, 100.0), (10.0, 80.0), (50.0, 90.0), (60.0, 90.0)], 5.0)
        90.0
    """
    nearest = sorted(measurements, key=lambda m: (abs(m[0] - when), m[0]))[:RECENT]
    return statistics.median(m[1] for m in nearest) if nearest else None


@dataclass(frozen=True)
class MetricNoise:
    """The baseline's metric over several seeds, and the epsilon drawn from it."""

    seeds: list[int]
    values: list[float]

    @property
    def sd(self) -> float:
        return statistics.stdev(self.values) if len(self.values) >= 2 else 0.0

    @property
    def epsilon(self) -> float:
        return EPSILON_SDS * self.sd

    def to_dict(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "values": self.values, "sd": self.sd, "epsilon": self.epsilon}

    @classmethod
    def from_dict(cls, data: Any) -> MetricNoise | None:
        """The stored estimate; None when absent or unreadable."""
        try:
            return cls([int(s) for s in data["seeds"]], [float(v) for v in data["values"]])
        except (TypeError, KeyError, ValueError):
            return None


def within_noise(delta: float | None, epsilon: float) -> bool:
    """Whether a metric difference is within the noise (never, when no noise is known)."""
    return delta is not None and epsilon > 0 and abs(delta) <= epsilon
