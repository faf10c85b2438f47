"""The default training budget, capped by time (issue 30: defaults never plan hours silently).

Without ``--train-samples`` a training run trains 5 epochs of the training set
(``advisor.core.results.default_train_samples``): seconds on the bundled examples, hours on
a real dataset once multiplied by the study's training runs. So before a new study is
written, the baseline's probe is run once (a few seconds: build, warm-up, timed steps) to
time its training step, and the study's training runs are estimated: the baseline's seeds,
the share of the search's configurations that train (``estimate.TRAINING_SHARE``; all of
them with ``--train all``) and the undecided candidates' extra seeds. When at the default
budget they would take more than ``CAP_S`` in all (or, with ``--budget``, more than
``BUDGET_SHARE`` of it), each training run trains fewer samples, a whole number of the
baseline's batches, so that they fit; one note says what was chosen, why, and how to
choose otherwise (``--train-samples N``).

The cap: 40 minutes of training runs. They are where a default study's time goes; its 20
probes, the baseline's re-measurements and the paired confirmation take seconds to
minutes each, so that the whole study stays around an hour. The decision is a function of
the measured times only, and it is stored with the study (``training_budget``): a resumed
study trains with the budget it started with, whatever this machine measures now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from advisor.core.events import Listener, Note
from advisor.core.results import TrialPayload
from advisor.core.stop import Stop
from advisor.core.study_attrs import TRAINING_BUDGET
from advisor.core.units import duration_text
from advisor.runner.executor import Executor, run_one
from advisor.study.confirmation.pairing import probe_settings
from advisor.study.run._estimate import TRAINING_SHARE
from advisor.study.run.plan import StudyPlan

CAP_S = 2400.0  # the default study's training runs, all together: 40 min (the study: about an hour)
BUDGET_SHARE = 0.5  # with --budget: the share of it the training runs may take
MIN_BATCHES = 10  # a capped training run trains at least this many of the baseline's batches
SIZING_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class TrainingBudget:
    """The samples each training run trains, and why.

    Attributes:
        train_samples: what each training run trains.
        default_samples: the default (5 epochs of the training set).
        runs: the study's training runs, estimated (a fraction: a share of the search's).
        step_samples_s: the baseline's training throughput, samples/s (its probe).
        fixed_s: a run's cost besides its training steps (build, warm-up, evaluation).
        cap_s: what the runs may take in all; capped: whether the default was cut.
    """

    train_samples: int
    default_samples: int
    runs: float
    step_samples_s: float
    fixed_s: float
    cap_s: float
    capped: bool

    def run_s(self, samples: int) -> float:
        return self.fixed_s + samples / self.step_samples_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, epochs: float, batch: int, budget: bool) -> str:
        default = self.runs * self.run_s(self.default_samples)
        chosen = self.runs * self.run_s(self.train_samples)
        why = (f"half of --budget, {duration_text(self.cap_s)}" if budget
               else f"{duration_text(self.cap_s)}, the default cap")
        return (f"training budget: {self.train_samples:,} samples per training run "
                f"({self.train_samples / batch:.0f} batches of {batch}), not the default {self.default_samples:,} "
                f"({epochs:g} epochs): at {self.step_samples_s:,.0f} samples/s (the baseline's probe) the study's "
                f"~{self.runs:.0f} training runs would take about {duration_text(default)}, over {why}; now about "
                f"{duration_text(chosen)}. "
                "--train-samples N chooses it yourself")


def choose(default_samples: int, batch: int, step_samples_s: float, fixed_s: float, runs: float,
           cap_s: float) -> TrainingBudget:
    """The budget for measured times: the default when its runs fit in ``cap_s``, else the
    most whole batches that fit (at least ``MIN_BATCHES``, at most the default).

    Example:
        >>> choose(8000, 64, 100.0, 2.0, 20, 2400.0).train_samples   # 20 x (2 + 80) s fits
        8000
        >>> b = choose(80000, 64, 100.0, 2.0, 20, 2400.0)         # 20 x (2 + 800) s does not
        >>> b.train_samples, b.capped, round(20 * b.run_s(b.train_samples))
        (11776, True, 2395)
    """
    if step_samples_s <= 0 or runs <= 0:
        return TrainingBudget(default_samples, default_samples, runs, step_samples_s, fixed_s, cap_s, False)
    fits = (cap_s / runs - fixed_s) * step_samples_s
    if fits >= default_samples:
        return TrainingBudget(default_samples, default_samples, runs, step_samples_s, fixed_s, cap_s, False)
    batches = max(MIN_BATCHES, int(fits // batch))
    samples = min(default_samples, batches * batch)
    return TrainingBudget(samples, default_samples, runs, step_samples_s, fixed_s, cap_s, samples < default_samples)


def training_runs(trials: int, seeds: int, top: int, two_stage: bool) -> float:
    """How many training runs a study of ``trials`` should make: the baseline's seeds, the
    search's (a share with two-stage evaluation), the undecided candidates' extra seeds."""
    share = TRAINING_SHARE if two_stage else 1.0
    return seeds + share * max(0, trials - 1) + min(top, max(0, trials - 1)) * max(0, seeds - 1)


def applies(plan: StudyPlan) -> bool:
    """The default budget is in play: a training study without --train-samples."""
    return plan.options.workload == "train" and plan.options.train_samples is None


def settle(plan: StudyPlan, stored: Callable[[], dict[str, Any] | None], executor: Executor, stop: Stop,
           emit: Listener) -> StudyPlan:
    """``plan`` with the training budget it runs with: as stored by the study it resumes
    (``stored()``: its attributes, None while there is no such study), else chosen now from
    the baseline's probe. Unchanged with --train-samples, for inference, or for a study
    stored without a decision (one from before, or given --train-samples then). A driver
    that started the same new study meanwhile decided first: its decision is kept."""
    if not applies(plan):
        return plan
    attrs = stored()
    if attrs is not None:
        return _kept(plan, attrs)
    payload = TrialPayload.of(plan.workload, plan.baseline, probe_settings(plan.settings))
    result = run_one(executor, 3_000_000, payload, plan.options.trial_timeout or SIZING_TIMEOUT_S, stop)
    attrs = stored()
    if attrs is not None:
        return _kept(plan, attrs)
    if not result.ok or not result.throughput:
        return plan  # the baseline's own run says what is wrong
    fixed = float(result.phase_s.get("total", 0.0)) + float(plan.facts.get("val_size") or 0) / result.throughput
    runs = training_runs(plan.options.trials, plan.options.metric_seeds, plan.options.confirm_top,
                         plan.options.two_stage)
    cap = BUDGET_SHARE * plan.options.budget if plan.options.budget else CAP_S
    batch = plan.baseline.batch_size
    budget = choose(plan.settings.train_samples, batch, float(result.throughput), fixed, runs, cap)
    if budget.capped:
        epochs = budget.default_samples / max(1, plan.facts.get("train_size") or budget.default_samples)
        emit(Note(budget.text(epochs, batch, bool(plan.options.budget))))
    return _with(plan, budget.train_samples, budget.to_dict())


def _kept(plan: StudyPlan, attrs: dict[str, Any]) -> StudyPlan:
    kept = attrs.get(TRAINING_BUDGET)
    if not isinstance(kept, dict) or not isinstance(kept.get("train_samples"), int):
        return plan
    return _with(plan, kept["train_samples"], kept)


def _with(plan: StudyPlan, samples: int, decision: dict[str, Any]) -> StudyPlan:
    return replace(plan, settings=replace(plan.settings, train_samples=samples), training_budget=decision)
