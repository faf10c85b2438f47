"""Paired confirmation's records: a pair's ratios, a configuration's pairs and their
interval, when its pairing stops. Plain numbers; nothing here runs a trial
(``advisor.study.confirmation.pairing`` does), and the interval arithmetic and the stopping rule are
``advisor.core.intervals`` (Stein's two-stage rule within a sitting, one-way random
effects across sittings: the reasons are there).

A *pair* is one run of the configuration against the baseline measured around it: a run
of the baseline just before and one just after, not shared with any other round
(``advisor.study.confirmation.pairing``), and the pair compares the configuration with the baseline
interpolated at its moment, so a machine that drifts linearly over the round cancels.
Each pair gives a throughput ratio and a memory ratio (configuration / baseline), and
belongs to a *sitting*: the pairs measured by one run of ``advisor tune`` / ``advisor
confirm``. Pairs stored before sittings were recorded are sitting 0.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from advisor.core.intervals import FIRST_STAGE, Interval, interval, logs_of, pairs_needed, pooled_interval, sd, t975
from advisor.core.noise import off_by

__all__ = ["DEFAULT_MAX_PAIRS", "DEFAULT_TARGET", "DEFAULT_TOP", "FIRST_STAGE", "LEVEL", "MIN_PAIRS", "STATUSES",
           "Confirmation", "Interval", "Pair", "beaten", "interpolate", "interval", "settled", "t975"]

DEFAULT_TARGET = 0.03  # stop once the interval is within +-3% of the ratio
DEFAULT_MAX_PAIRS = 8
DEFAULT_TOP = 6  # configurations confirmed at the end of a study
MIN_PAIRS = FIRST_STAGE  # never stop a sitting on fewer pairs (Stein's first stage)
LEVEL = 0.95
_SLACK = 1e-9  # the stopping rule's half-width is within the target up to rounding
_WORDS = {"throughput_ratio": "throughput", "memory_ratio": "memory"}  # a figure in a note
# A CPU trial's peak memory is its resident set's high-water mark (advisor.machine.memory). Within one
# sitting the pairs agree to a few percent, but between sittings (each with fresh trial processes and fork
# servers) the same configuration's memory ratio moves: benchmarks/memory_sittings.py, batch size 128 against
# the baseline, log SD of the sitting means 0.049 (digits_mlp) and 0.113 (digits_cnn: 1.36-1.79x) over 5
# sittings each, then 0.067 and 0.062 over 8 (1.15-1.41x, 1.56-1.90x); pooled 0.074. One sitting's pairs
# cannot see that, so a resident memory interval is never narrower than +-1.96 SD of it
RESIDENT_LOG_SD = 0.075
RESIDENT_FLOOR = 1.96 * RESIDENT_LOG_SD  # the log half-width: about +-16%
# a pair whose throughput ratio is this far (a factor) from the median of the configuration's other
# counted pairs had a run disturbed beyond what its sentinel and blocks showed: within a sitting pairs
# spread by a log SD of about 0.15 and sittings move by about 0.14 (benchmarks/drift.py), so a factor of
# 2 is over 4 SDs; a review's pair read 0.15x among 0.57-0.72x with its sentinel at its median
OUTLIER_FACTOR = 2.0
OUTLIER_MIN_PAIRS = 3  # the counted pairs a median needs before it judges another pair
DISTURBED_ALLOWANCE = 2  # pairs left out as disturbed do not count toward the cap; all pairs stop at twice it
# the caption's word on a pair count marked * (a review read "8 pairs" of eight disturbed pairs)
DISTURBED_PAIRS_NOTE = ("* after a pair count: pairs with a disturbed run were left out of that row's figures (the "
                        "count is of those kept), or every one of its pairs had one and none could be left out")
# the caption's word on pooled sittings (a review read "median over that many pairs" beside a centre
# that was the sittings' mean, and an interval of <0.01->100 with no word on why)
SITTINGS_NOTE = ("Pairs from more than one sitting (one `advisor tune` or `advisor confirm`) are pooled: the centre is "
                 "the mean of the sittings' own, and the interval allows for how far the sittings differ, so with "
                 "two sittings (one degree of freedom) sittings that differ give a wide one; a third narrows it. "
                 "Pairs with a disturbed run are left out while clean ones exist")


def interpolate(a: float | None, b: float | None, w: float) -> float:
    """Geometric interpolation from ``a`` (w = 0) to ``b`` (w = 1): a drift by a factor
    over the round cancels."""
    if not a or not b:
        return float(a or b or 0.0)
    return math.exp((1 - w) * math.log(a) + w * math.log(b))


@dataclass(frozen=True)
class Pair:
    """One pair: the configuration's figures and the baseline's at its moment.

    ``position``: where the configuration ran between the round's two baseline runs
    (0: right after the first, 1: right before the second); the baseline figures are
    interpolated there. ``sentinel``: the readings of the three runs, seconds.
    ``sitting``: which sitting measured it. ``disturbed``: empty, or why one of its runs
    is kept although the sentinel showed a disturbed machine (every retry was disturbed
    too: the least disturbed run was kept). ``resident``: its memory figures are CPU
    resident peaks (their interval is floored, ``RESIDENT_FLOOR``); False for a GPU's
    allocator peaks, and for pairs stored before advisor recorded it.
    """

    position: float
    baseline_throughput: float
    config_throughput: float
    baseline_memory: float
    config_memory: float
    sentinel: list[float] = field(default_factory=list)
    sitting: int = 0
    disturbed: str = ""
    resident: bool = False

    @property
    def throughput_ratio(self) -> float:
        return self.config_throughput / self.baseline_throughput

    @property
    def memory_ratio(self) -> float:
        return self.config_memory / self.baseline_memory if self.baseline_memory else 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"throughput_ratio": self.throughput_ratio, "memory_ratio": self.memory_ratio}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pair:
        return cls(float(data["position"]), float(data["baseline_throughput"]), float(data["config_throughput"]),
                   float(data["baseline_memory"]), float(data["config_memory"]), list(data.get("sentinel") or []),
                   int(data.get("sitting") or 0), str(data.get("disturbed") or ""), bool(data.get("resident")))


STATUSES = ("running", "confirmed", "capped", "wide", "settled", "dominated", "failed")


@dataclass
class Confirmation:
    """A configuration's pairs against the baseline and what they show.

    ``status``: ``running`` (more pairs due), ``confirmed`` (the current sitting has the
    pairs Stein's rule asks for and both intervals are within their targets: the target, and
    for a CPU's memory the floor where it is wider, ``target_of``), ``capped``
    (the pair cap, counted over all sittings, came first: the interval is wider than the
    target), ``wide`` (the sitting's pairs are done but the sittings disagree: the pooled
    interval is wider than the target; another sitting narrows it), ``settled`` (stopped
    early in its sitting, after at least ``MIN_PAIRS`` pairs: its intervals lie clear of the
    baseline's and of every other candidate's, so more pairs cannot reorder the picks;
    ``settled()``), ``dominated`` (stopped early: its interval shows a configuration it
    cannot beat), ``failed`` (a run of the configuration failed; ``note`` says how).
    """

    trial: int
    pairs: list[Pair] = field(default_factory=list)
    status: str = "running"
    note: str = ""

    @property
    def sitting(self) -> int:
        """The latest sitting with a pair (0 without any)."""
        return max((p.sitting for p in self.pairs), default=0)

    @property
    def counted(self) -> list[Pair]:
        """The pairs its figures are read from: those without a disturbed run (kept only
        because every try was disturbed, or far off the others: ``outlier``); all of them
        when none is clean. A sitting whose pairs were all disturbed then adds nothing (a
        review's busy second sitting pulled a clean 1.23x (1.17-1.30) to 0.76x (<0.01-100))."""
        clean = [p for p in self.pairs if not p.disturbed]
        return clean if clean else list(self.pairs)

    @property
    def left_out(self) -> int:
        """How many stored pairs its figures leave out (disturbed)."""
        return len(self.pairs) - len(self.counted)

    @property
    def all_disturbed(self) -> bool:
        """Whether every pair had a disturbed run (so none could be left out)."""
        return bool(self.pairs) and all(p.disturbed for p in self.pairs)

    def outlier(self, pair: Pair) -> str | None:
        """Why ``pair`` is off the configuration's counted pairs of its own sitting by more than
        ``OUTLIER_FACTOR`` in throughput (from at least ``OUTLIER_MIN_PAIRS`` of them), or None.
        Its own sitting's: a later sitting that disagrees as a whole widens the interval (the
        random effects), it is not thrown out pair by pair against the first."""
        others = [p.throughput_ratio for p in self.counted if p is not pair and p.sitting == pair.sitting]
        if len(others) < OUTLIER_MIN_PAIRS or pair.throughput_ratio <= 0:
            return None
        median = statistics.median(others)
        factor = off_by(pair.throughput_ratio, median)
        if factor <= OUTLIER_FACTOR:
            return None
        return (f"its throughput ratio {pair.throughput_ratio:.2f}x is {factor:.1f}x off the median "
                f"{median:.2f}x of its {len(others)} other pairs in this sitting")

    def _by_sitting(self, figure: str) -> list[list[float]]:
        groups: dict[int, list[float]] = {}
        for p in self.counted:
            groups.setdefault(p.sitting, []).append(getattr(p, figure))
        return [groups[s] for s in sorted(groups)]

    @property
    def throughput(self) -> Interval | None:
        return pooled_interval(self._by_sitting("throughput_ratio"))

    @property
    def memory(self) -> Interval | None:
        """The memory ratio's interval: the pairs', never narrower than ``memory_floor``."""
        return floored(self.memory_measured, self.memory_floor)

    @property
    def memory_measured(self) -> Interval | None:
        """The memory ratio's interval from the pairs alone (what more pairs narrow)."""
        return pooled_interval(self._by_sitting("memory_ratio"))

    @property
    def memory_floor(self) -> float:
        """The least log half-width its memory interval may have: ``RESIDENT_FLOOR`` for CPU
        resident peaks (a sitting cannot see how far they move between sittings), else 0."""
        return RESIDENT_FLOOR if any(p.resident for p in self.pairs) else 0.0

    @property
    def done(self) -> bool:
        return self.status != "running"

    def _mine(self, sitting: int | None) -> list[Pair]:
        current = self.sitting if sitting is None else sitting
        return [p for p in self.counted if p.sitting == current]

    def target_of(self, figure: str, target: float) -> float:
        """The relative half-width ``figure`` ("throughput_ratio" or "memory_ratio") is paired
        to: ``target``, or for a floored memory interval (CPU resident peaks) the floor where
        it is wider: the interval shown is never narrower than the floor, so pairs spent
        narrowing the measured one below it change nothing a user reads (README command 1 on
        this CPU paired a candidate to the cap for a memory interval of +-3% and showed +-16%)."""
        if figure == "memory_ratio" and self.memory_floor > 0:
            return max(target, math.sinh(self.memory_floor))
        return target

    def needed_by(self, target: float, sitting: int | None = None) -> dict[str, int] | None:
        """The pairs ``sitting`` (default: the latest) needs under Stein's rule for each
        figure's interval within its target (``target_of``); None before its first stage is
        complete."""
        mine = self._mine(sitting)
        need = {figure: pairs_needed([getattr(p, figure) for p in mine], self.target_of(figure, target))
                for figure in ("throughput_ratio", "memory_ratio")}
        return None if None in need.values() else need  # type: ignore[return-value]

    def needed(self, target: float, sitting: int | None = None) -> int | None:
        """The pairs ``sitting`` (default: the latest) needs under Stein's rule for both
        intervals within their targets (``target_of``); None before its first stage is complete."""
        need = self.needed_by(target, sitting)
        return None if need is None else max(need.values())

    def settle(self, target: float, max_pairs: int, sitting: int | None = None) -> None:
        """Stop pairing once ``sitting`` (default: the latest) has the pairs Stein's rule
        asks for, or the pair cap (over all sittings) is reached; a stop decided earlier
        (dominated, failed) stands, and so does ``settled`` within the sitting that settled it.
        The cap counts the pairs the figures count: a disturbed pair left out of them is not
        one of ``--pairs N`` (a review's `--pairs 6` gave 5), up to ``DISTURBED_ALLOWANCE``
        times the cap in all."""
        if self.status not in ("running", "confirmed", "capped", "wide", "settled"):
            return
        if self.status == "settled" and self._mine(sitting):
            return
        need = self.needed(target, sitting)
        if need is not None and len(self._mine(sitting)) >= need:
            thr, mem = self.throughput, self.memory_measured  # the floor is no pair's to narrow
            assert thr is not None and mem is not None  # the sitting has pairs
            within = (thr.halfwidth <= target + _SLACK
                      and mem.halfwidth <= self.target_of("memory_ratio", target) + _SLACK)
            self.status = "confirmed" if within else "wide"
        elif len(self.counted) >= max_pairs or len(self.pairs) >= DISTURBED_ALLOWANCE * max_pairs:
            self.status = "capped"
        else:
            self.status = "running"

    def out_of_reach(self, target: float, max_pairs: int, sitting: int | None = None) -> str | None:
        """Why a figure's target (``target_of``) cannot be met within ``max_pairs`` (known
        once the sitting's first stage is complete), naming the figure, with the half-width
        its interval is expected to have at the cap; None if both can."""
        need = self.needed_by(target, sitting)
        room = self._room(max_pairs, sitting)
        if need is None or max(need.values()) <= room:
            return None
        short = [figure for figure in ("throughput_ratio", "memory_ratio") if need[figure] > room]
        said = " and ".join(f"{_WORDS[f]}'s +-{100 * self.target_of(f, target):.1f}%" for f in short)
        widths = [f"+-{100 * math.sinh(self.log_halfwidth_at_cap(f, max_pairs) or 0.0):.1f}%" for f in short]
        at_cap = (f"{_WORDS[short[0]]}'s interval will be about {widths[0]}"
                  + "".join(f" and {_WORDS[f]}'s about {w}" for f, w in zip(short[1:], widths[1:])))
        most = max(need.values())
        return (f"{said} {'are' if len(short) > 1 else 'is'} out of reach: the spread of the first {FIRST_STAGE} "
                f"pairs asks for {most} pairs in this sitting and the cap of {max_pairs} leaves {room}; pairing goes "
                f"on to the cap, where {at_cap} (--pairs {max_pairs - room + most} would reach the target)")

    def _room(self, max_pairs: int, sitting: int | None) -> int:
        """The pairs ``sitting`` (default: the latest) may count: the cap less the other
        sittings' counted pairs (disturbed ones count toward no cap)."""
        return max_pairs - (len(self.counted) - len(self._mine(sitting)))

    def log_halfwidth_at_cap(self, figure: str, max_pairs: int) -> float | None:
        """The half-width (natural log) that the latest sitting's interval of ``figure``
        ("throughput_ratio" or "memory_ratio") is expected to have at the pair cap: Stein's,
        from its first stage's spread. None before that stage is complete."""
        mine = self._mine(None)
        if len(mine) < FIRST_STAGE:
            return None
        room = self._room(max_pairs, None)
        logs = logs_of([getattr(p, figure) for p in mine])
        expected = t975(FIRST_STAGE - 1) * sd(logs[:FIRST_STAGE]) / math.sqrt(max(1, room))
        return max(expected, self.memory_floor) if figure == "memory_ratio" else expected

    def to_dict(self) -> dict[str, Any]:
        thr, mem = self.throughput, self.memory
        return {"trial": self.trial, "status": self.status, "note": self.note,
                "pairs": [p.to_dict() for p in self.pairs],
                "throughput_ratio": thr.to_dict() if thr else None, "memory_ratio": mem.to_dict() if mem else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Confirmation:
        status = data.get("status", "running")
        return cls(int(data["trial"]), [Pair.from_dict(p) for p in data.get("pairs") or []],
                   status if status in STATUSES else "running", str(data.get("note") or ""))



def resident_note(confirmations: Iterable[Confirmation]) -> str:
    """The sentence a front table's caption adds when any memory interval shown is floored
    ('' when none is)."""
    if not any(p.resident for c in confirmations for p in c.pairs):
        return ""
    return (f"A CPU's memory interval is at least +-{100 * math.expm1(RESIDENT_FLOOR):.0f}%: resident peaks move "
            "that much between sittings")


def floored(found: Interval | None, floor: float) -> Interval | None:
    """``found`` widened to at least ``floor`` (log half-width) either side of its centre."""
    if found is None or floor <= 0 or not math.isfinite(found.high) or found.low <= 0:
        return found
    centre = math.log(found.center)
    return replace(found, low=min(found.low, math.exp(centre - floor)), high=max(found.high, math.exp(centre + floor)))


def settled(mine: Confirmation, others: Sequence[Confirmation], min_pairs: int = MIN_PAIRS,
            max_pairs: int | None = None) -> str | None:
    """Why more pairs of ``mine`` cannot change the fastest or the smallest pick, or None
    (issue 31: confirmation sized to the decision). Once its latest sitting has
    ``min_pairs`` pairs (Stein's first stage: never fewer), its place must be decided on
    both figures against the baseline (ratio 1) and every other candidate still in play
    (not failed, not dominated; one without an interval yet keeps it open): its throughput
    interval lies wholly above every other's (it is the fastest) or wholly below some
    other's (it cannot be), and likewise its memory interval for the smallest. More pairs
    would then narrow its interval, not move those picks. The balanced pick, which scales
    the figures, can still move a little within the intervals; the best-metric pick does
    not depend on pairs.

    With ``max_pairs`` (the pair cap), a place is also settled as a *tie* when the pairs
    left cannot decide it: some candidate (or the baseline) overlapping ``mine`` is
    expected to overlap it still at the cap (their centres lie closer than the two
    half-widths Stein's rule expects there, ``Confirmation.log_halfwidth_at_cap``), and no
    candidate above it could be parted from it. Either of the tied is as good a pick, and
    pairing to the cap would not say which (three candidates at 1.66-1.71x in README
    command 1 each paired to the cap of 8)."""
    thr, mem, n = mine.throughput, mine.memory, len(mine._mine(None))
    if thr is None or mem is None or n < min_pairs:
        return None
    rivals = [o for o in others if o is not mine and o.status not in ("failed", "dominated")]
    places, ties = [], []
    for figure, own, sign in (("throughput", thr, 1.0), ("memory", mem, -1.0)):  # memory: lower is better
        spans: list[tuple[float, float, float, Confirmation | None]] = [(sign, sign, sign, None)]  # the baseline
        for other in rivals:
            theirs = getattr(other, figure)
            if theirs is None or theirs.n < 2:
                return None
            a, b = sorted((sign * theirs.low, sign * theirs.high))
            spans.append((a, b, sign * theirs.center, other))
        low, high = sorted((sign * own.low, sign * own.high))
        best = "the fastest" if figure == "throughput" else "the smallest"
        if low > max(b for _, b, _, _ in spans):
            places.append(best)
        elif high < max(a for a, _, _, _ in spans):
            places.append(f"not {best}")
        elif (tied := _tied(mine, figure, sign * own.center, [s for s in spans if s[1] >= low], max_pairs)):
            ties.append(f"tied for {best} with {tied}")
        else:
            return None
    decided = f"{' and '.join(places)} beyond the intervals" if places else ""
    if not ties:
        return f"settled after {n} pairs: {decided}"
    assert max_pairs is not None  # a tie is only called against the cap
    left = max_pairs - len(mine.counted)  # the cap counts the counted pairs
    why = f"the {left} pairs left cannot part them" if left > 0 else "no pairs are left to part them"
    return f"settled after {n} pairs: {'; '.join([*ties, *([decided] if decided else [])])} ({why})"


def _tied(mine: Confirmation, figure: str, centre: float, blocking: list[tuple[float, float, float, Any]],
          max_pairs: int | None) -> str:
    """Who ``mine`` ties with for the best place on ``figure`` (names, "" for no tie):
    ``blocking`` are the intervals (signed: higher is better) reaching above its bottom,
    each with its centre and candidate (None: the baseline). Tied when one of them cannot
    be parted from ``mine`` by the cap and no one above could be; one sitting only."""
    if max_pairs is None:
        return ""
    ratio = f"{figure}_ratio"

    def at_cap(c: Confirmation) -> float | None:  # None: not projected (before its first stage, or pooled sittings)
        return c.log_halfwidth_at_cap(ratio, max_pairs) if len({p.sitting for p in c.pairs}) == 1 else None

    own_h = at_cap(mine)
    if own_h is None:
        return ""
    floor = max(a for a, _, _, _ in blocking)  # one below this is beaten beyond the intervals: out of the race
    inseparable = []
    for _, b, theirs, other in blocking:
        h = 0.0 if other is None else at_cap(other)
        if h is None:
            return ""
        apart = abs(math.log(abs(centre)) - math.log(abs(theirs))) >= own_h + h
        if apart and theirs > centre:
            return ""  # it could still be shown to be above: not the best place, decided by more pairs
        if not apart and b >= floor:  # README command 1 listed, as tied for the fastest, trials below 1.00x
            inseparable.append("the baseline" if other is None else f"trial {other.trial}")
    return ", ".join(inseparable)


def beaten(mine: Confirmation, other: Confirmation | None, metric_worse: bool) -> bool:
    """Whether ``mine`` is dominated beyond doubt: ``other`` (None: the baseline, ratio 1)
    is faster than the top of ``mine``'s throughput interval and smaller than the bottom
    of its memory interval, at a metric ``mine`` does not beat beyond noise
    (``metric_worse``: the caller's judgement)."""
    thr, mem = mine.throughput, mine.memory
    if thr is None or mem is None or thr.n < 2 or not metric_worse:
        return False
    if other is None:
        return thr.high < 1.0 and mem.low > 1.0
    o_thr, o_mem = other.throughput, other.memory
    if o_thr is None or o_mem is None or o_thr.n < 2:
        return False
    return thr.high < o_thr.low and mem.low > o_mem.high
