"""What keeps a running study's figures honest between trials: the baseline's metric over
several seeds (the metric's noise), the verdict on each trial's interference (a trial whose
timer kept too few clean blocks runs again, ``advisor.core.interference``; the study's
limit for the next trials comes from its recent blocks, ``InterferencePool``), and the
baseline measured again during the study (after the one-knob seeds, every
``REMEASURE_EVERY`` trials, and whenever the noise sentinel drifts), so that each ratio
shown is to the baseline's reference at that time: the median of its ``RECENT`` latest
measurements (``advisor.core.noise.recent_reference``), never one probe alone.

When a trial's retries run out, the cleanest of its runs (fewest blocks dropped) is kept,
marked in its telemetry (``kept``). Without interference counters (not Linux), or before
there are enough block scores to draw a limit from (trials of a few slow blocks), the
noise sentinel decides, and only a slower machine counts.

The Tuner owns one ``BaselineWatch`` and calls it at those points; the watch runs its own
measurements (probes, seed replicas) through the Tuner's executor and stores them as
study attributes (``advisor.core.study_attrs``).
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import replace
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.events import Listener, Note
from advisor.core.feasibility import verdict
from advisor.core.interference import InterferencePool, disturbance, rerun_reason, summary_of
from advisor.core.noise import MetricNoise, SentinelJudge, disturbed_alone, off_by, reading_of, recent_reference
from advisor.core.objectives import Limits, Versus, ratio
from advisor.core.pairs import OUTLIER_FACTOR
from advisor.core.results import TrialPayload, TrialResult, TrialSettings
from advisor.core.settle import tolerance_from
from advisor.core.stop import Stop
from advisor.core.stored import (
    TrialRecord,
    baseline_measurements,
    read_trial,
    reference_measurements,
    reference_throughput_at,
)
from advisor.core.study_attrs import BASELINE_DISTURBED, BASELINE_MEASUREMENTS, StudyAttrs
from advisor.core.units import first_line
from advisor.runner.executor import Executor, run_one
from advisor.study.confirmation.pairing import probe_settings

REMEASURE_EVERY = 10  # counted trials between two measurements of the baseline
RERUNS = 2  # a trial measured on a disturbed machine runs again at most this often


class BaselineWatch:
    """Args:
        study: the Optuna study (measurements are stored as its attributes).
        workload: the loaded model.py; settings: the study's trial settings.
        baseline: the baseline configuration.
        executor: runs the watch's own measurements, one at a time.
        stop: the user's stop (Ctrl-C): the watch's own measurements end with it.
        on_event: receives ``Note`` events.
        fixed_tolerance: the settings' timing tolerance was asked for (``--timing-tolerance``):
            the baseline's spread does not set it.
    """

    def __init__(self, study: Any, workload: Any, settings: TrialSettings, baseline: TrialConfig,
                 executor: Executor, stop: Stop, on_event: Listener, fixed_tolerance: bool = False) -> None:
        self.study, self.workload, self.settings, self.baseline = study, workload, settings, baseline
        self.fixed_tolerance = fixed_tolerance
        self.executor, self.stop, self.emit = executor, stop, on_event
        records = [read_trial(t) for t in study.get_trials(deepcopy=False)]
        self.judge = SentinelJudge(x for x in (reading_of(r.get("telemetry")) for r in records) if x is not None)
        self.pool = InterferencePool(r.get("telemetry") for r in records)
        self.attrs = StudyAttrs(study)
        self.measurements: list[dict[str, Any]] = self.attrs.baseline_measurements()
        base = next((r for r in records if r.baseline and r.state == "complete"), None)
        last = self.measurements[-1] if self.measurements else None
        self.base_reading = ((last.get("sentinel_median_s") or last.get("sentinel_s")) if last is not None
                             else reading_of(base.get("telemetry")) if base else None)
        self.base_disturbed = self.attrs.baseline_disturbed()
        usable = reference_measurements(self.measurements)  # a disturbed one is on record only: as StoredStudy
        trial0 = [base.figures.throughput] if base and base.figures and not (
            usable and self.base_disturbed) else []  # reads it
        self.references: list[float] = trial0 + [m["throughput"] for m in usable]
        # trial 0's own figure: what a re-measurement is weighed against while nothing else stands
        self.first_throughput = base.figures.throughput if base and base.figures else None
        self.counted_at_last = sum(r.counted for r in records)
        self.reruns: dict[int, int] = {}  # by trial number
        self.runs: dict[int, list[TrialResult]] = {}  # a trial's disturbed runs so far, by trial number
        self.epsilon = 0.0  # the metric's noise, once measured
        self.noise: MetricNoise | None = None  # the baseline's metric over its seeds, once measured
        self.load_noise()
        self._numbers = itertools.count(2_000_000)  # executor handle numbers, apart from trial numbers

    # ---- the metric's noise ------------------------------------------------------------
    def metric_noise(self, base: TrialRecord, seeds: int, timeout: float, part: str = "full") -> None:
        """Train the baseline with ``seeds - 1`` more seeds (once per study) and store the
        metric's noise; as training runs (``part``), with their learning curves (which
        the metric gate reads)."""
        if seeds < 2 or self.attrs.has_metric_noise() or base.figures is None:
            return
        first = self.settings.seed
        values, used, curves = [base.figures.score], [first], []
        self.emit(Note(f"training the baseline with {seeds - 1} more seed(s) to measure the metric's noise"))
        for seed in range(first + 1, first + seeds):
            result = self._run(self.baseline, replace(self.settings, seed=seed, part=part), timeout)
            if self.stop.halted:
                return
            self.judge.add(reading_of(result.telemetry))
            self.pool.add(result.telemetry)
            if not result.ok or result.score is None:
                self.emit(Note(f"the baseline with seed {seed} failed [{result.failure_class}]: "
                               f"{first_line(result.failure_message, 200)}; the noise estimate leaves it out"))
                continue
            values.append(result.score)
            used.append(seed)
            if result.telemetry.get("curve"):
                curves.append(result.telemetry["curve"])
        noise = MetricNoise(used, values)
        self.attrs.set_metric_noise(noise, curves)
        self.epsilon, self.noise = noise.epsilon, noise
        spec = self.workload.metric_spec
        self.emit(Note(f"the metric's noise: {spec.name} {', '.join(spec.value_text(v) for v in values)} over seeds "
                       f"{used} (mean {spec.value_text(statistics.fmean(values))}, the reference every trial is "
                       f"judged against); seed-to-seed spread {spec.noise_text(noise.epsilon)}"))

    def load_noise(self) -> None:
        """The metric's noise as stored (measured here, or by another driver on the study)."""
        noise = self.attrs.metric_noise()
        if noise is not None:
            self.epsilon, self.noise = noise.epsilon, noise

    def versus(self, result: TrialResult, base: TrialRecord, limits: Limits, when: float | None,
               probe: bool = False) -> Versus | None:
        """A result measured at ``when`` against the baseline trial ``base`` (unconfirmed):
        its throughput to the baseline's reference as it stood then, by the rule every later
        reading of the study applies (``advisor.core.stored.reference_throughput_at``); its
        metric against the baseline's seed mean with the verdict
        (``advisor.core.feasibility``); a probe's (``probe``) without the metric."""
        if not result.ok or (result.score is None and not probe) or base.figures is None:
            return None
        measured = baseline_measurements({BASELINE_MEASUREMENTS: self.measurements,
                                          BASELINE_DISTURBED: self.base_disturbed}, base)
        reference = reference_throughput_at(measured, base, when)
        figures = base.figures
        seeds = self.noise.values if self.noise is not None and self.noise.values else [figures.score]
        mean = statistics.fmean(seeds)
        delta = judged = None
        if result.score is not None:
            delta = result.score - mean
            judged = verdict([result.score], seeds, limits.allowed(mean))
        return Versus(ratio(result.throughput, reference), ratio(result.peak_memory_bytes, figures.peak_memory_bytes),
                      delta, epsilon=self.epsilon, verdict=judged)

    @property
    def base_throughput(self) -> float | None:
        """The baseline's reference now: the median of its latest measurements."""
        return recent_reference(list(enumerate(self.references)))

    # ---- the machine's noise -----------------------------------------------------------
    @property
    def limit(self) -> float | None:
        """The interference limit the next trials' timers judge their blocks by."""
        return self.pool.limit

    @property
    def timing_tolerance(self) -> float | None:
        """How well the next trials time their steps: to about the baseline's own
        run-to-run spread (``advisor.core.settle.tolerance_from``); None until it has been
        measured 3 times (the settings' tolerance holds until then), or with ``fixed_tolerance``."""
        return None if self.fixed_tolerance else tolerance_from(self.references)

    def why_disturbed(self, result: TrialResult) -> str | None:
        """Why ``result`` cannot stand (too few clean blocks; without interference counters,
        or with too few block scores yet to draw a limit from, a sentinel reading slower
        than the study's), or None. Informs the judges too."""
        reading = reading_of(result.telemetry)
        if not result.ok:
            why = None
        elif (summary_of(result.telemetry) or {}).get("limit") is not None:
            why = rerun_reason(result.telemetry)
        else:
            why = self.judge.disturbed(reading)
        self.judge.add(reading)
        self.pool.add(result.telemetry)
        return why

    def disturbed(self, number: int, result: TrialResult) -> tuple[str | None, TrialResult]:
        """Whether trial ``number`` must run again: (why, None to keep it; the result to
        keep). At most ``RERUNS`` times per trial; then the cleanest of its runs is kept,
        marked."""
        why = self.why_disturbed(result)
        if why is None:
            self.runs.pop(number, None)
            return None, result
        runs = self.runs.setdefault(number, [])
        runs.append(result)
        if self.reruns.get(number, 0) < RERUNS:
            self.reruns[number] = self.reruns.get(number, 0) + 1
            return why, result
        return None, cleanest(self.runs.pop(number), why)

    # ---- the baseline, measured again -------------------------------------------------
    def check_first_run(self, base: TrialRecord, counted: int, last_trial: int, timeout: float) -> None:
        """The baseline's first run, judged by its own readings (the study has nothing to
        compare it with yet: ``disturbed_alone``). A disturbed one is no reference: the
        baseline is measured again at once, before any ratio is drawn, and ratios are to
        that measurement (trial 0 left out, as ``StoredStudy`` reads it)."""
        if self.measurements or self.base_disturbed:
            return
        why = disturbed_alone(base.get("telemetry"))
        if why is None:
            return
        self.attrs.set_baseline_disturbed(f"its first run: {why}")
        self.base_disturbed = True
        self.references = []
        self.remeasure(f"its first run was disturbed: {why}", counted, last_trial, timeout)

    def remeasure_reason(self, counted: int, seeds_done: bool, before_combining: bool = False) -> str | None:
        """Why the baseline should be measured again now, or None (``before_combining``: the
        search's combination step waits for it, ``Strategy.reference_due``). A drift is acted on once
        per trial counted at most: on a machine whose readings swing, measuring the baseline
        again and again found it drifted again each time (22 measurements in a row, and the
        study's four trials took 239 s), never running a trial."""
        since = counted - self.counted_at_last
        if since > 0 and self.judge.drifted(self.base_reading):
            return "the noise sentinel drifted since the baseline was last measured"
        if before_combining and since > 0:
            return "the one-knob seeds are in; their combinations are chosen against it"
        if seeds_done and not self.measurements and since > 0:
            return "the one-knob seeds are in"
        if since >= REMEASURE_EVERY:
            return f"{since} trials since the baseline was last measured"
        return None

    def remeasure(self, reason: str, counted: int, last_trial: int, timeout: float) -> None:
        """Measure the baseline again (a probe; once more if the machine was disturbed)."""
        self.counted_at_last = counted  # also when it fails: try again only after more trials
        tries: list[TrialResult] = []
        why: str | None = None
        far_seen: TrialResult | None = None  # a clean try too far off the reference
        for _ in range(2):
            result = self._run(self.baseline, probe_settings(self.settings), timeout)
            if self.stop.halted:
                return
            if not result.ok:
                self.base_reading = self.judge.median  # no new drift verdict until it moves again
                self.emit(Note(f"measuring the baseline again failed [{result.failure_class}]: "
                               f"{first_line(result.failure_message, 200)}"))
                return
            why = self.why_disturbed(result)
            tries.append(result)
            far = self._far_off(result) if why is None and not far_seen else None
            if far:  # twice in a row, the machine changed; once, a run disturbed beyond its readings
                far_seen = result
                self.emit(Note(f"measuring the baseline again: {far}; running it once more"))
                why = far
                continue
            if why is None:
                break
        if why is not None:
            result = cleanest(tries, why)
        reading = reading_of(result.telemetry)
        entry = {"at": time.time(), "after_trial": last_trial, "throughput": result.throughput,
                 "peak_memory_bytes": result.peak_memory_bytes, "sentinel_s": reading,
                 "sentinel_median_s": self.judge.median, "reason": reason, "host": result.host}
        if why is not None:  # on record, not the reference (a review's 0.08x run was)
            self.base_reading = self.judge.median
            self.measurements = self.attrs.add_baseline_measurement(entry | {"disturbed": why})
            # with nothing standing yet (trial 0 disturbed too), trial 0's own run stays the reference: a
            # review's disturbed re-measurement at 0.03x became it, and every ratio read 30x
            stays = (f"{self.base_throughput:,.0f} samples/s" if self.base_throughput else
                     f"trial 0's own run, {self.first_throughput:,.0f} samples/s, until a measurement stands"
                     if self.first_throughput else "trial 0's own run until a measurement stands")
            self.emit(Note(f"baseline measured again ({reason}): no try could stand (the last: {why}); "
                           f"kept on record, not as a reference: ratios stay to {stays}"))
            return
        trial0 = (self.judge.disturbed(self.base_reading) if self.base_reading is not None and
                  self.judge.median is not None and not self.measurements else None)
        if trial0:  # trial 0's own sentinel was off: it is no reference
            self.attrs.set_baseline_disturbed(trial0)
            self.base_disturbed = True
        if far_seen is not None and off_by(result.throughput, far_seen.throughput) <= OUTLIER_FACTOR:
            # two clean tries in a row agree far off the reference: the machine changed, and both are
            # its measurements (a review's median held two stale readings against one new one, 30x off)
            first = reading_of(far_seen.telemetry)
            self.attrs.add_baseline_measurement(entry | {"at": entry["at"] - 1e-3, "throughput": far_seen.throughput,
                                                         "peak_memory_bytes": far_seen.peak_memory_bytes,
                                                         "sentinel_s": first})
            self.references.append(far_seen.throughput)
        self.measurements = self.attrs.add_baseline_measurement(entry)  # with any another driver added
        # the machine's state it was measured in: the median of the recent readings (its own
        # included), not its one reading, which a swing can put off that median at once
        previous, self.base_reading = self.base_throughput, entry["sentinel_median_s"] or reading
        self.references.append(result.throughput)
        change = f" ({result.throughput / previous:.2f}x the previous reference)" if previous else ""
        self.emit(Note(f"baseline measured again ({reason}): {result.throughput:,.0f} samples/s{change}; "
                       f"ratios from here are to the median of its latest measurements, "
                       f"{self.base_throughput:,.0f} samples/s"))

    def _far_off(self, result: TrialResult) -> str | None:
        """Why a clean re-measurement is too far off the reference to stand alone (more than
        ``OUTLIER_FACTOR`` either way), or None."""
        previous = self.base_throughput or self.first_throughput  # nothing stands yet: trial 0's own run
        if not previous or not result.throughput:
            return None
        factor = off_by(result.throughput, previous)
        if factor <= OUTLIER_FACTOR:
            return None
        return f"it read {result.throughput:,.0f} samples/s, {factor:.1f}x off the reference {previous:,.0f}"

    def _run(self, config: TrialConfig, settings: TrialSettings, timeout: float) -> TrialResult:
        payload = TrialPayload.of(self.workload, config, settings, interference_limit=self.limit,
                                  timing_tolerance=self.timing_tolerance)
        return run_one(self.executor, next(self._numbers), payload, timeout, self.stop)


def cleanest(runs: list[TrialResult], why: str) -> TrialResult:
    """The least disturbed of a trial's runs (fewest blocks dropped, then the lowest median
    interference; without counters, the fastest sentinel reading), marked as kept although
    every run was disturbed (the last one for ``why``)."""
    best = min(runs, key=lambda r: (*disturbance(r.telemetry), reading_of(r.telemetry) or float("inf")))
    best.telemetry["kept"] = (f"the least disturbed of {len(runs)} runs, every one disturbed "
                              f"(the last: {why})")
    return best
