"""What disturbed each timed block of a trial, and which blocks (and trials) to trust.

The trial's step timer (``advisor.machine.timing``) reads the process's interference
counters (``advisor.machine.interference``) where each block of timed steps starts and
ends. Per block, its **score** is the share of the block lost to other work:

- the run-queue wait of the process's threads (``/proc/self/task/*/schedstat``) as a share
  of their runnable time (running + waiting for a CPU): 0 when every thread had a CPU
  whenever it wanted one, 0.5 when a busy neighbour took every other slice;
- plus the CPU steal time (``/proc/stat``, a hypervisor running another guest) as a share of
  all CPUs' time.

Involuntary context switches and CPU time against wall time are recorded with each block
for a reader; they do not enter the score (both move with the model's own threading).

A block is **disturbed** when its score is an upper outlier of the study's own spread (a
modified z-score above ``Z`` over the median and MAD of the recent blocks' scores, as
hyperfine flags outliers; never below ``FLOOR``), for a data-parallel trial (its ranks
share the machine) also of its own blocks (that steady waiting is the configuration, not a
neighbour), *and* it was slower than the trial's undisturbed blocks: a block that ran
faster is never dropped. In a trial of several ranks a block also counts as disturbed when
it overlaps in time a block another rank found disturbed (``overlapping``): the ranks wait
for each other in their collectives, so a neighbour that took one rank's CPU slowed them
all, though only that rank's counters show it. The step time is the median
of the clean blocks; a trial is run again only when fewer than ``CLEAN_SHARE`` of its
blocks (or fewer than ``MIN_CLEAN``) are clean. Where no counter can be read (not Linux),
a block has no score and is always clean.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from typing import Any

Z = 3.5  # modified z-score (0.6745 (x - median) / MAD) above which a score is an outlier (Iglewicz-Hoaglin)
FLOOR = 0.05  # a block that lost under 5% of its time is never called disturbed (within the timing's own noise)
# a trial whose blocks lost over 15% of their time, at the median, ran on a busy machine, whatever the
# study's spread says: quiet blocks lose about 1% here and a steady neighbour's about 27%
# (benchmarks/results/sentinel.json). It is not run again for it (on a machine busy for the whole study a
# rerun is as busy, and the tests' two workers would run every trial three times), but its speed decides
# nothing (``busy``): a review's study beside a busy benchmark lost about half of every block, the study's
# limit rose over 1, and a probe 16x too slow ruled its configuration out
CEILING = 0.15
MIN_SCORES = 8  # no limit from fewer scores than this (the trial's own blocks then decide alone)
CLEAN_SHARE = 0.5  # a trial with fewer than half its blocks clean is run again ...
MIN_CLEAN = 3  # ... and so is one with fewer clean blocks than this
WINDOW = 400  # the study's limit is over its last WINDOW block scores (a lasting change moves it)


def score(block: dict[str, Any]) -> float | None:
    """The share of a block lost to interference (run-queue wait share + steal share), or
    None when neither counter was read."""
    parts = []
    run, wait = block.get("run_s"), block.get("wait_s")
    if isinstance(run, (int, float)) and isinstance(wait, (int, float)) and run + wait > 0:
        parts.append(max(0.0, wait) / (run + wait))
    steal, total = block.get("steal_s"), block.get("cpus_s")
    if isinstance(steal, (int, float)) and isinstance(total, (int, float)) and total > 0:
        parts.append(max(0.0, steal) / total)
    return sum(parts) if parts else None


def limit_of(scores: Iterable[float | None]) -> float | None:
    """The score above which a block is disturbed: median + Z x MAD / 0.6745 of ``scores``
    (at least ``FLOOR``); None with fewer than ``MIN_SCORES`` scores."""
    values = [s for s in scores if s is not None]
    if len(values) < MIN_SCORES:
        return None
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    return max(FLOOR, median + Z * mad / 0.6745)


def disturbed_blocks(step_s: list[float], scores: list[float | None], limit: float | None,
                     self_contended: bool = False, elsewhere: Collection[int] = ()) -> list[int]:
    """The indices of the disturbed blocks: score over ``limit``, or among ``elsewhere``
    (blocks that another rank's disturbed blocks overlap), and slower than the median of
    the other blocks (all of them when there are no others). A ``self_contended`` trial
    (data-parallel ranks sharing the machine) waits for a CPU in every block alike: that
    is the configuration, not a neighbour, so its blocks must also be outliers of its own
    spread (``limit_of`` its own scores) to count."""
    if limit is None and not elsewhere:
        return []
    own = limit_of(scores) if self_contended else None
    if limit is not None and own is not None:
        limit = max(limit, own)

    def over(i: int, s: float | None) -> bool:
        return i in elsewhere or (limit is not None and s is not None and s > limit)

    high = [i for i, s in enumerate(scores) if over(i, s)]
    quiet = [t for i, (t, s) in enumerate(zip(step_s, scores)) if not over(i, s)]
    if not quiet:
        return high
    typical = statistics.median(quiet)
    return [i for i in high if step_s[i] > typical]


def overlapping(windows: Sequence[tuple[float, float] | None], others: Iterable[Sequence[float]]) -> list[int]:
    """The indices of ``windows`` (a block's start and end on the machine's monotonic
    clock; None: not known) that overlap any of ``others`` (another rank's disturbed
    blocks, on the same clock)."""
    spans = [(float(a), float(b)) for a, b in others]
    return [i for i, w in enumerate(windows)
            if w is not None and any(a < w[1] and w[0] < b for a, b in spans)]


def too_few_clean(blocks: int, clean: int) -> bool:
    """Whether a trial that dropped blocks kept too few clean ones for its step time to
    stand (a trial that dropped none stands, however few blocks its time cap allowed)."""
    return clean < blocks and (clean < MIN_CLEAN or clean < CLEAN_SHARE * blocks)


def summary_of(telemetry: dict[str, Any] | None) -> dict[str, Any] | None:
    """A trial's interference summary (``telemetry["interference"]``), or None."""
    found = (telemetry or {}).get("interference")
    return found if isinstance(found, dict) and isinstance(found.get("blocks"), int) else None


def block_scores(telemetry: dict[str, Any] | None) -> list[float]:
    """A trial's scored timed blocks' scores ([] when none was scored or not measured)."""
    return [x for x in (summary_of(telemetry) or {}).get("scores") or [] if isinstance(x, (int, float))]


def rerun_reason(telemetry: dict[str, Any] | None) -> str | None:
    """Why a trial must run again (too few clean blocks, or too few clean windows of its
    latency calls), or None (also when not measured)."""
    s = summary_of(telemetry)
    latency = (telemetry or {}).get("latency")
    if isinstance(latency, dict) and latency.get("too_few_clean") and not (s or {}).get("too_few_clean"):
        return (f"interference disturbed {latency.get('disturbed_windows')} of the {latency.get('windows')} windows "
                "of its latency calls: too few clean calls remain")
    if s is None or not s.get("too_few_clean"):
        return None
    limit = s.get("limit")
    over = f"over {100 * limit:.0f}% of the block, " if isinstance(limit, (int, float)) else ""
    return (f"interference disturbed {s['blocks'] - s['clean']} of its {s['blocks']} timed blocks "
            f"(run-queue wait or steal {over}by the {s.get('limit_from', 'trial')}'s spread): "
            "too few clean blocks remain")


def busy(telemetry: dict[str, Any] | None) -> bool:
    """Whether a trial's timed blocks lost over ``CEILING`` of their time at the median (its
    speed then reads too slow by an unknown amount); never for a trial whose own ranks or
    threads outnumber its CPUs (its waiting is its configuration)."""
    if (summary_of(telemetry) or {}).get("self_contended"):
        return False
    return CEILING < disturbance(telemetry)[1] < math.inf  # inf: no block scored


def disturbance(telemetry: dict[str, Any] | None) -> tuple[float, float]:
    """How disturbed a run was, to compare runs of one trial (lower is cleaner): the share
    of its blocks dropped, then its median score; (inf, inf) when not measured."""
    s = summary_of(telemetry)
    if s is None or not s["blocks"]:
        return math.inf, math.inf
    scores = block_scores(telemetry)
    return (s["blocks"] - s["clean"]) / s["blocks"], statistics.median(scores) if scores else math.inf


class InterferencePool:
    """The study's recent block scores, and the limit drawn from them for the next trials."""

    def __init__(self, telemetries: Iterable[dict[str, Any] | None] = ()) -> None:
        self.scores: deque[float] = deque(maxlen=WINDOW)
        for t in telemetries:
            self.add(t)

    def add(self, telemetry: dict[str, Any] | None) -> None:
        self.scores.extend(block_scores(telemetry))

    @property
    def limit(self) -> float | None:
        return limit_of(self.scores)
