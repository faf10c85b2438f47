"""The search strategy: which configuration the study runs next, and what it learns from
each result. The Tuner calls ``propose()`` for the next configuration to run and
``tell()`` with its result; everything else happens here:

1. the baseline (the user's current setup) first, alone;
2. with the ``default`` sampler, the baseline with one knob changed (``one_knob``), then,
   once those are in, combinations of the changes that paid off (``combine``);
3. then the Optuna sampler's proposals (TPE by default);
4. a proposal already measured is answered from the earlier trial (a duplicate); one that
   cannot work (knob values that cannot be combined, more devices than the cluster has), or
   would run out of memory (``known_oom``) or fail (``known_failures``) like earlier trials,
   is recorded as skipped. Neither runs, and neither counts towards the study's number of trials.

The strategy owns the Optuna study's ask / tell cycle: it asks the sampler, stores each
result (``record_result``), and tells the sampler. It never runs a trial.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from advisor.core.config import TrialConfig
from advisor.core.events import Duplicate, Listener, Note, Skipped, ignore
from advisor.core.objectives import Figures, Limits
from advisor.core.results import TrialResult
from advisor.core.stored import (
    BASELINE,
    COMBINATION,
    CONFIG,
    DISTURBED_RUNS,
    DRIVER,
    DUPLICATE_OF,
    SEED_CONFIG,
    TrialRecord,
    config_attrs,
    read_study,
    read_trial,
    result_attrs,
    skipped_attrs,
)
from advisor.search.combine import combination_configs, combination_count
from advisor.search.known_failures import KnownFailures
from advisor.search.known_oom import KnownOom
from advisor.search.one_knob import seed_configs, seed_count
from advisor.search.space import SearchSpace
from advisor.techniques.rules import refusal

if TYPE_CHECKING:
    import optuna

DUPLICATES_IN_A_ROW = 50  # the sampler has nothing new to offer: stop


@dataclass(frozen=True)
class Proposal:
    """A configuration to run as trial ``number`` of the study."""

    number: int
    config: TrialConfig
    baseline: bool = False


def record_result(study: optuna.Study, trial: optuna.Trial, result: TrialResult, wall_s: float,
                  limits: Limits, baseline_accuracy: float | None) -> optuna.trial.FrozenTrial:
    """Store one trial's result: every figure as a user attribute, the objectives, and the
    constraints against the baseline's accuracy (its own, for the baseline); a failure as
    FAIL."""
    import optuna

    for key, value in result_attrs(result, wall_s).items():
        trial.set_user_attr(key, value)
    if not result.ok:
        return study.tell(trial, state=optuna.trial.TrialState.FAIL)
    figures = Figures(result.throughput, result.peak_memory_bytes, result.accuracy)  # type: ignore[arg-type]
    reference = figures.accuracy if baseline_accuracy is None else baseline_accuracy
    for key, value in limits.constraints(figures, reference).items():
        trial.set_constraint(key, value)
    return study.tell(trial, list(figures))


class Strategy:
    """Proposes configurations for ``study`` and records their results.

    Args:
        study: the (new or resumed) Optuna study; stored trials are learned from.
        space: the search space, filtered for this machine.
        baseline: the user's current setup (trial 0).
        workload: "train" or "inference".
        sampler: "default" (seeds, combinations, then TPE) or a plain sampler's name;
            the study was created with that sampler.
        budget: the study's total number of trials (sizes the seed and combination steps).
        limits: what makes a trial feasible.
        max_devices: the most devices one trial can get (GPU slots), or None.
        on_event: receives ``Skipped``, ``Duplicate`` and ``Note`` events.
    """

    def __init__(self, study: optuna.Study, space: SearchSpace, baseline: TrialConfig, *, workload: str,
                 sampler: str, budget: int, limits: Limits, max_devices: int | None = None,
                 driver: str | None = None, on_event: Listener = ignore) -> None:
        self.study, self.space, self.baseline = study, space, baseline
        self.workload, self.budget, self.limits = workload, budget, limits
        self.max_devices, self.driver, self.emit = max_devices, driver, on_event
        self.baseline_record: TrialRecord | None = None
        self.baseline_failure: TrialRecord | None = None  # the latest baseline trial that failed (counted)
        self.counted = 0  # trials stored that count towards the budget, by any driver
        # every configuration measured, skipped or running, by key: a repeat is a duplicate
        self._seen: dict[str, TrialRecord | Proposal] = {}
        self._known_oom, self._known_failures = KnownOom(), KnownFailures(baseline)
        self._asked: dict[int, tuple[optuna.Trial, Proposal]] = {}
        self._final: set[int] = set()  # numbers of the finished trials learnt from
        self.others_running: dict[int, TrialRecord] = {}  # started by other drivers, not finished yet
        self.observe(quiet=True)  # a resumed study: what its stored trials showed
        self._space_size = space.size()
        self._seeds_due = sampler == "default"
        self._combine_due = sampler == "default" and not study.user_attrs.get("combined")
        self._duplicates_in_a_row = 0
        self.gave_up: str | None = None  # why the strategy stopped proposing for good

    # ---- the two calls the Tuner makes ----------------------------------------------
    def propose_baseline(self) -> Proposal:
        """The baseline as the next trial (when the study has no completed baseline)."""
        self.study.enqueue_trial(self.space.enqueue_params(self.baseline), user_attrs={BASELINE: True})
        trial = self.study.ask()
        return self._hand_out(trial, self.space.sample(trial, base=self.baseline), baseline=True)

    def propose(self) -> Proposal | None:
        """The next configuration to run, or None when there is none for now: the seeds'
        results are awaited before combining them, every configuration has been seen
        (``space_exhausted``), or the sampler only repeats itself (``gave_up``)."""
        if self._seeds_due:
            self._enqueue_seeds()
        while not self.space_exhausted and self.gave_up is None:
            if self._combine_due and not self._waiting():
                if self._asked:
                    return None  # every seed's result first
                self._enqueue_combinations()
            trial = self.study.ask()
            seed = trial.user_attrs.get(SEED_CONFIG)
            config = self.space.sample(trial, base=TrialConfig.from_dict(seed) if seed else None)
            earlier = self._seen.get(config.key())
            if earlier is not None:
                self._tell_duplicate(trial, earlier)
                continue
            self._duplicates_in_a_row = 0
            reason, failure_class = self._why_not(config)
            if reason:
                self._skip(trial, config, reason, failure_class)
                continue
            return self._hand_out(trial, config)
        return None

    def tell(self, number: int, result: TrialResult, wall_s: float) -> TrialRecord:
        """Store the result of trial ``number`` and learn from it; returns the stored record."""
        trial, _ = self._asked[number]
        return self.finished(number, record_result(self.study, trial, result, wall_s, self.limits,
                                                   self.reference_accuracy))

    @property
    def reference_accuracy(self) -> float | None:
        """The baseline's metric (None until it is in: the baseline is its own reference)."""
        base = self.baseline_record
        return base.figures.accuracy if base is not None and base.figures is not None else None

    def running(self, number: int) -> tuple[optuna.Trial, Proposal]:
        """The Optuna trial and proposal of running trial ``number`` (for two-stage evaluation,
        ``advisor.study.accuracy_queue``, which stores its parts)."""
        return self._asked[number]

    def finished(self, number: int, frozen: optuna.trial.FrozenTrial) -> TrialRecord:
        """Learn from trial ``number``, now stored as ``frozen`` (told to Optuna)."""
        _, proposal = self._asked.pop(number)
        record = read_trial(frozen)
        self._final.add(number)
        self._learn(record, proposal.config.key())
        return record

    def observe(self, quiet: bool = False) -> None:
        """Learn from the trials stored or started by others since the last call (an earlier
        run of the study, or another driver on it: ``advisor.study.drivers``): their
        configurations count as seen, their results as counted and as known failures
        (``quiet``: without a note of what that teaches)."""
        for frozen in self.study.get_trials(deepcopy=False):
            if frozen.number in self._final or frozen.number in self._asked:
                continue
            record = read_trial(frozen)
            if record.state == "waiting":
                continue
            key = record.config.key() if record.config is not None else None
            if record.state == "running":  # (without a configuration: just asked for; it may still be skipped)
                self.others_running[record.number] = record
                if key is not None:
                    self._seen.setdefault(key, record)
                continue
            self._final.add(record.number)
            self.others_running.pop(record.number, None)
            self._learn(record, key, quiet)

    def _learn(self, record: TrialRecord, key: str | None, quiet: bool = False) -> None:
        if key is not None and (record.counted or record.state == "skipped"):
            self._seen[key] = record
        elif key is not None and getattr(self._seen.get(key), "number", None) == record.number:
            self._seen.pop(key)  # cut short, or lost with its node: the configuration may run again
        self.counted += record.counted
        self._known_oom.learn([record])
        if (learned := self._known_failures.add(record)) is not None and not quiet:
            self.emit(Note(learned))
        if record.baseline and record.state == "complete":
            self.baseline_record = record
        elif record.baseline and record.counted:
            self.baseline_failure = record

    def adopt(self, frozen: optuna.trial.FrozenTrial) -> Proposal:
        """Take over a trial an earlier driver left running between its two parts (its
        probe stored): it continues here as if proposed now."""
        import optuna

        trial = optuna.trial.Trial(self.study, frozen._trial_id)
        config = TrialConfig.from_dict(frozen.user_attrs[CONFIG])
        proposal = Proposal(frozen.number, config, bool(frozen.user_attrs.get(BASELINE)))
        self.others_running.pop(frozen.number, None)
        if self.driver is not None:
            trial.set_user_attr(DRIVER, self.driver)
        self._asked[frozen.number] = (trial, proposal)
        self._seen[config.key()] = proposal
        return proposal

    def note_disturbed(self, number: int, result: TrialResult, why: str) -> None:
        """Record with running trial ``number`` a measurement taken on a disturbed machine
        (its figures and why); the trial runs again and counts once, when it completes."""
        trial, _ = self._asked[number]
        runs = list(trial.user_attrs.get(DISTURBED_RUNS, []))
        runs.append({"reason": why, "throughput": result.throughput, "peak_memory_bytes": result.peak_memory_bytes,
                     "accuracy": result.accuracy, "sentinel": result.telemetry.get("sentinel")})
        trial.set_user_attr(DISTURBED_RUNS, runs)

    @property
    def seeds_done(self) -> bool:
        """The one-knob seeds are measured (their combinations queued), or there were none."""
        return not self._seeds_due and not self._combine_due

    @property
    def last_number(self) -> int:
        """The number of the latest trial of the study (-1 before any)."""
        trials = self.study.get_trials(deepcopy=False)
        return trials[-1].number if trials else -1

    @property
    def space_exhausted(self) -> bool:
        """Every configuration of the space has been measured, skipped or is running."""
        return len(self._seen) >= self._space_size

    @property
    def space_size(self) -> int:
        return self._space_size

    # ---- the steps -------------------------------------------------------------------
    def _hand_out(self, trial: optuna.Trial, config: TrialConfig, baseline: bool = False) -> Proposal:
        if self.driver is not None:  # first: a trial with a configuration names its driver
            trial.set_user_attr(DRIVER, self.driver)
        for key, value in config_attrs(config).items():
            trial.set_user_attr(key, value)
        proposal = Proposal(trial.number, config, baseline)
        self._asked[trial.number] = (trial, proposal)
        self._seen[config.key()] = proposal
        return proposal

    def _enqueue_seeds(self) -> None:
        """The baseline with one knob changed, queued for the sampler to hand out first."""
        self._seeds_due = False
        for config in seed_configs(self.space, self.baseline, seed_count(self.budget), self.workload):
            if config.key() not in self._seen:  # sampled with the seed as base: nothing else changes
                self.study.enqueue_trial(self.space.enqueue_params(config), skip_if_exists=True,
                                         user_attrs={SEED_CONFIG: config.to_dict()})

    def _enqueue_combinations(self) -> None:
        """Queue the combinations of one-knob changes that paid off (once per study)."""
        self._combine_due = False
        self.study.set_user_attr("combined", True)
        base = self.baseline_record
        if base is None or base.figures is None:
            return
        stored = read_study(self.study)
        first = base.figures.throughput

        def figures(r: TrialRecord) -> Figures | None:
            """Its figures, throughput rescaled to the baseline measured nearest in time to it
            (the combination step divides by trial 0's)."""
            if r.figures is None:
                return None
            reference = stored.reference_throughput(r) or first
            return r.figures._replace(throughput=r.figures.throughput * first / reference)

        measured = [(r.config, figures(r)) for r in stored.records
                    if r.counted and r.config is not None and not r.baseline]
        chosen = combination_configs(self.baseline, base.figures, measured, self.limits,
                                     combination_count(self.budget), self._allowed)
        for config in chosen:
            self.study.enqueue_trial(self.space.enqueue_params(config), skip_if_exists=True,
                                     user_attrs={SEED_CONFIG: config.to_dict(), COMBINATION: True})
        if chosen:
            self.emit(Note(f"next: {len(chosen)} combination(s) of the one-knob changes that paid off"))

    def _allowed(self, config: TrialConfig) -> bool:
        return config.key() not in self._seen and self._why_not(config)[0] is None

    def _why_not(self, config: TrialConfig) -> tuple[str | None, str]:
        """Why ``config`` is not run (and the failure class it is recorded with), or None."""
        reason = refusal(config, self.workload)
        if reason:
            return reason, "unsupported"
        if self.max_devices is not None and config.devices > self.max_devices:
            return f"devices={config.devices} is more than this cluster's {self.max_devices} GPU slots", "unsupported"
        oom = self._known_oom.reason(config)
        if oom:
            return oom, "oom"
        return self._known_failures.reason(config) or (None, "")

    def _waiting(self) -> bool:
        import optuna

        return bool(self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))

    def _skip(self, trial: optuna.Trial, config: TrialConfig, reason: str, failure_class: str) -> None:
        """Record a configuration that is not run as failed and skipped (not counted)."""
        import optuna

        for key, value in skipped_attrs(config, reason, failure_class).items():
            trial.set_user_attr(key, value)
        self._seen[config.key()] = read_trial(self.study.tell(trial, state=optuna.trial.TrialState.FAIL))
        self._final.add(trial.number)
        self.emit(Skipped(trial.number, config, reason))

    def _tell_duplicate(self, trial: optuna.Trial, earlier: TrialRecord | Proposal) -> None:
        """A configuration already measured (or running): answer from the earlier trial."""
        import optuna

        trial.set_user_attr(DUPLICATE_OF, earlier.number)
        if isinstance(earlier, TrialRecord) and earlier.state == "complete" and earlier.figures is not None:
            for key, value in earlier.constraints.items():
                trial.set_constraint(key, value)
            self.study.tell(trial, list(earlier.figures))
        else:  # still running, skipped, or it failed
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self._final.add(trial.number)
        self.emit(Duplicate(trial.number, earlier.number))
        self._duplicates_in_a_row += 1
        if self._duplicates_in_a_row >= DUPLICATES_IN_A_ROW:
            self.gave_up = (f"the sampler proposed only already-measured configurations {DUPLICATES_IN_A_ROW} "
                            "times in a row")

