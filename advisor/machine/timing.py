"""The step timer: how a trial's step time is measured.

The loops leave a few steps untimed (the first, where torch.compile compiles, is timed
apart as compile time); steps are pooled into blocks of equal step count lasting about
``block_s`` seconds (so timer noise does not dominate short steps) and timed until the
timing has settled (``advisor.core.settle``): the leading blocks that were still warming
up are cut as they show (MSER), and once at least ``min_blocks`` blocks follow them (and
``min_steps`` steps were timed) and their median's 95% interval is within ``tolerance``
(+-5% by default; a study sets it from its own noise), timing stops; else after
``max_seconds`` of timed steps, warm-up included. The median, the IQR and the interval of
the blocks after the warm-up are kept.

The device is synchronised where a block starts and where it ends, not around every step:
inside a block the steps run as a training loop runs them, so the host queues the next
step while the device computes, and a prefetching loader's pinned, non-blocking copies
overlap the previous step's compute (with a synchronisation per step, ``pin_memory``
could never show its benefit). The first timed step is timed alone, to size the blocks.

Where a block starts and ends (outside the timed stretch) the process's interference
counters are read (``advisor.machine.interference``); a block that other work disturbed
(``advisor.core.interference``: its score over the study's ``limit``, or the trial's own
blocks' when the study has none yet, and slower than the undisturbed blocks) is dropped:
the warm-up cut, the median, the IQR and the verdict are over the clean blocks.
``interference()`` says how many were dropped and why. Each block's start and end are
kept on the machine's monotonic clock (``perf_counter``, one clock for all processes on
Linux), so that the ranks of one trial can drop the blocks another rank found disturbed
(``disturbed_windows`` and ``note_elsewhere``; ``advisor.trial.shared.share_disturbed``).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from advisor.core.interference import disturbed_blocks, limit_of, overlapping, score, too_few_clean
from advisor.core.settle import MIN_BLOCKS, TOLERANCE, halfwidth, settle, settled
from advisor.machine.interference import accumulate, difference, read_counters


@dataclass(frozen=True)
class Timing:
    median_s: float
    iqr_s: float
    steps: int
    timed_s: float
    converged: bool
    low_s: float = 0.0  # the median's 95% interval (advisor.core.settle.median_interval)
    high_s: float = 0.0
    warmup_blocks: int = 0  # leading blocks cut as warm-up
    blocks: int = 0  # the blocks the median is over
    tolerance: float | None = None  # how well the median was to be known (the timer's ``tolerance``)

    @property
    def rel_iqr(self) -> float:
        return self.iqr_s / self.median_s if self.median_s > 0 else float("inf")

    @property
    def halfwidth(self) -> float:
        """The median's interval's half width on a log scale (0.03: known to about +-3%)."""
        return halfwidth(self.low_s, self.high_s, self.blocks)

    def to_dict(self) -> dict[str, Any]:
        half = self.halfwidth
        return asdict(self) | {"rel_iqr": self.rel_iqr, "halfwidth": half if math.isfinite(half) else None}


def median_iqr(samples: list[float]) -> tuple[float, float]:
    if len(samples) < 2:
        return (samples[0] if samples else 0.0), 0.0
    q1, q2, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q2, q3 - q1


class StepTimer:
    """Collects per-step durations and decides when the estimate is good enough.

    Example:
        >>> timer = StepTimer(min_steps=5, max_seconds=1.0)
        >>> while not timer.done():
        ...     with timer.step():
        ...         pass
    """

    def __init__(self, min_steps: int = MIN_BLOCKS, tolerance: float = TOLERANCE, max_seconds: float = 5.0,
                 sync: Any = None, block_s: float = 0.05, min_blocks: int = MIN_BLOCKS, limit: float | None = None,
                 counters: Callable[[], dict[str, float] | None] | None = read_counters,
                 self_contended: bool = False) -> None:
        self.min_steps = min_steps
        self.tolerance = tolerance
        self.max_seconds = max_seconds
        self.block_s = block_s
        self.min_blocks = min_blocks
        self.self_contended = self_contended  # its own threads, loader workers or ranks outnumber its CPUs
        self.sync = sync or (lambda: None)
        self.samples: list[float] = []  # seconds per step, one per block
        self.steps = 0
        self.total_s = 0.0
        self._block = [0.0, 0]
        self._per_block = 0
        self._open_at: float | None = None  # when the steps not yet recorded started (synchronised)
        self._open_steps = 0
        self.windows: list[tuple[float, float]] = []  # the timed stretches (perf_counter), for energy
        self.limit = limit  # the study's interference limit (None: the trial's own blocks')
        self.counters = counters or (lambda: None)
        self.counts: list[dict[str, float]] = []  # each block's interference counters, with samples
        self._block_counts: dict[str, float] = {}
        self._open_counters: dict[str, float] | None = None
        self.block_windows: list[tuple[float, float] | None] = []  # each block's start and end (perf_counter)
        self._block_window: tuple[float, float] | None = None
        self.elsewhere: list[Sequence[float]] = []  # the blocks other ranks of the trial found disturbed
        self._clean: tuple[tuple[int, int], list[int], float | None] = ((-1, -1), [], None)  # (key, dropped, limit)
        self._verdict: tuple[tuple[int, int], bool] = ((-1, -1), False)  # ((blocks, steps), converged), cached

    def step(self) -> _TimedStep:
        return _TimedStep(self)

    def add(self, seconds: float) -> None:
        """Record one step of ``seconds``: ``add_steps(seconds, 1)``."""
        self.add_steps(seconds, 1)

    def add_steps(self, seconds: float, steps: int, counts: dict[str, float] | None = None,
                  window: tuple[float, float] | None = None) -> None:
        """Record ``steps`` consecutive steps that took ``seconds`` together (``counts``: the
        interference counters' differences over them; ``window``: when they started and
        ended, on ``perf_counter``'s clock). Short steps are pooled into blocks of
        equal step count (sized from the first timed step to last about ``block_s``, and
        sized again, larger, when a block lasts under half that: the first timed step may
        still have been warming up) so that timer and scheduler noise does not dominate a
        sample; the median is over the clean blocks' mean step time."""
        if self._per_block == 0:
            self._per_block = self._steps_per_block(seconds / steps)
        self.steps += steps
        self.total_s += seconds
        self._block[0] += seconds
        self._block[1] += steps
        self._block_counts = accumulate(self._block_counts, (counts | {"wall_s": seconds}) if counts else {})
        if window is not None:
            self._block_window = (self._block_window or window)[0], window[1]
        if self._block[1] >= self._per_block:
            if self._block[0] < self.block_s / 2:  # sized on a warm-up step: the steps got faster since
                self._per_block = max(self._per_block, self._steps_per_block(self._block[0] / self._block[1]))
            self.samples.append(self._block[0] / self._block[1])
            self.counts.append(self._block_counts)
            self.block_windows.append(self._block_window)
            self._block, self._block_counts, self._block_window = [0.0, 0], {}, None

    def _steps_per_block(self, step_s: float) -> int:
        """Steps of ``step_s`` seconds that last about ``block_s`` together."""
        return max(1, math.ceil(self.block_s / max(step_s, 1e-9)))

    def discard_open(self) -> None:
        """Forget the steps timed since the last synchronisation: untimed work (an
        evaluation) is about to run before the next timed step."""
        self._open_at, self._open_steps, self._open_counters = None, 0, None

    def dropped(self) -> tuple[list[int], float | None]:
        """The disturbed blocks' indices (by their own counters, or overlapping a block
        another rank found disturbed), and the limit they were judged by."""
        key = (len(self.samples), len(self.elsewhere))
        if self._clean[0] != key:
            scores, limit = self._scores_and_limit()
            near = overlapping(self.block_windows, self.elsewhere)
            self._clean = (key, disturbed_blocks(self.samples, scores, limit, self.contended(), near), limit)
        return self._clean[1], self._clean[2]

    def _scores_and_limit(self) -> tuple[list[float | None], float | None]:
        scores = [score(c) for c in self.counts]
        return scores, (self.limit if self.limit is not None else limit_of(scores))

    def disturbed_windows(self) -> list[tuple[float, float]]:
        """When this process's disturbed blocks ran, by its own counters alone (for the
        other ranks of its trial)."""
        scores, limit = self._scores_and_limit()
        own = disturbed_blocks(self.samples, scores, limit, self.contended())
        return [w for i in own if (w := self.block_windows[i]) is not None]

    def note_elsewhere(self, windows: Sequence[Sequence[float]]) -> None:
        """Drop also the blocks that overlap ``windows`` ((start, end) each): blocks other
        ranks of this trial found disturbed (they waited for that rank in their collectives)."""
        self.elsewhere = list(windows)

    def contended(self) -> bool:
        """Whether this trial waits for a CPU in every block whatever the neighbours do: its
        ranks share the machine (a data-parallel trial), or its compute threads and loader
        workers outnumber its CPUs (``self_contended``, from its configuration: a thread
        count read from /proc is no sign, torch and Ray keep idle threads)."""
        return self.self_contended or int(os.environ.get("WORLD_SIZE", "1") or 1) > 1

    def clean_samples(self, strict: bool = False) -> list[float]:
        """The clean blocks' step times; unless ``strict``, all of them when too few are
        clean (the trial is then run again, ``advisor.core.interference.too_few_clean``)."""
        dropped = set(self.dropped()[0])
        clean = [s for i, s in enumerate(self.samples) if i not in dropped]
        return clean if strict or (clean and not too_few_clean(len(self.samples), len(clean))) else self.samples

    def converged(self) -> bool:
        """Settled on the clean blocks after their warm-up (a disturbed trial times on, up
        to ``max_seconds``, in case the disturbance passes). The verdict changes only when a
        block ends: it is kept until then, so that asking between the steps of a block (whose
        time runs on meanwhile) costs nothing."""
        key = (len(self.samples), self.steps)
        if self._verdict[0] != key:
            self._verdict = (key, self._converged())
        return self._verdict[1]

    def _converged(self) -> bool:
        samples = self.clean_samples(strict=True)
        if too_few_clean(len(self.samples), len(samples)):
            return False
        return self.steps >= self.min_steps and settled(samples, self.tolerance, self.min_blocks)

    def capped(self) -> bool:
        return self.total_s >= self.max_seconds and bool(self.samples)

    def done(self) -> bool:
        return self.converged() or self.capped()

    def result(self) -> Timing:
        samples = self.clean_samples() or ([self._block[0] / self._block[1]] if self._block[1] else [])
        if not samples:
            return Timing(0.0, 0.0, self.steps, self.total_s, False, tolerance=self.tolerance)
        settled = settle(samples)
        rest = samples[settled.warmup:]
        _, iqr = median_iqr(rest)
        return Timing(settled.median, iqr, self.steps, self.total_s, self.converged(), settled.low, settled.high,
                      settled.warmup, settled.blocks, self.tolerance)

    def interference(self) -> dict[str, Any] | None:
        """How many blocks were dropped and why (for the trial's telemetry); None when no
        counter could be read."""
        scores = [score(c) for c in self.counts]
        if not any(s is not None for s in scores):
            return None
        dropped, limit = self.dropped()
        clean = len(self.samples) - len(dropped)
        typical = statistics.median(self.clean_samples())
        total: dict[str, float] = {}
        for c in self.counts:
            total = accumulate(total, c)
        near = set(overlapping(self.block_windows, self.elsewhere))
        why = [{"block": i, "score": round(scores[i] or 0.0, 4), "slower": round(self.samples[i] / typical, 3),
                "wait_s": round(self.counts[i].get("wait_s", 0.0), 5),
                "steal_s": round(self.counts[i].get("steal_s", 0.0), 5),
                "nivcsw": self.counts[i].get("nivcsw"), "another_rank": i in near} for i in dropped[:10]]
        wall = total.get("wall_s")
        return {"blocks": len(self.samples), "clean": clean, "dropped": len(dropped),
                "dropped_for_another_rank": sum(i in near for i in dropped),
                "too_few_clean": too_few_clean(len(self.samples), clean),
                "limit": round(limit, 4) if limit is not None else None,
                "limit_from": "study" if self.limit is not None else "trial",
                "scores": [round(s, 4) if s is not None else None for s in scores], "why": why,
                "nivcsw": total.get("nivcsw"), "threads": total.get("threads"),
                "cpu_per_wall": round(total["cpu_s"] / wall, 3) if wall and "cpu_s" in total else None,
                "self_contended": self.contended()}  # its blocks wait for a CPU of its own doing


class _TimedStep:
    """One timed step: synchronises (and reads the clock) only where a block starts and
    ends, or around the first step, which sizes the blocks; a step that raises is not
    timed, and neither are the steps since the last synchronisation."""

    def __init__(self, timer: StepTimer) -> None:
        self.timer = timer

    def __enter__(self) -> None:
        t = self.timer
        if t._open_at is None:
            t.sync()
            t._open_counters = t.counters()
            t._open_at = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        t = self.timer
        if exc[0] is not None:
            t.discard_open()
            return
        t._open_steps += 1
        if t._per_block == 0 or t._block[1] + t._open_steps >= t._per_block:
            t.sync()
            assert t._open_at is not None
            now = time.perf_counter()
            counts = difference(t._open_counters, t.counters())
            seconds, steps = now - t._open_at, t._open_steps
            t.windows.append((t._open_at, now))
            t.discard_open()
            t.add_steps(seconds, steps, counts, t.windows[-1])
