"""How long the rest of a study will take, estimated from its baseline's measured times
(issue 30: no study plans hours silently). Once the baseline is in (its probe and its
training run timed, or its one full run) and its extra seeds have trained, the study says
what each remaining part should cost on this machine and in all, before the search:

- a trial: its probe, plus its training run for the share of configurations that reach
  the front (two-stage evaluation; ``TRAINING_SHARE``, what the bundled examples' studies
  showed), or one full run each (``--train all``, inference);
- the baseline measured again every ``REMEASURE_EVERY`` trials (a probe);
- the front's undecided candidates trained with the baseline's other seeds (at most
  ``--confirm-top`` of them; the worst case);
- paired confirmation: ``--confirm-top`` candidates, up to ``--pairs`` pairs each, a
  round of k candidates costing k + 2 probes (each round runs its own baseline twice).

Estimates, not promises: a trial's time moves with its configuration (a bigger batch, a
compile), and a neighbour slows the machine; the parts are given so a user can see which
one to cut (``--trials``, ``--train-samples``, ``--no-confirm``, ``--pairs``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from advisor.core.stored import PROBE_WALL, TRAINING_RUN, WALL, TrialRecord
from advisor.core.units import duration_text
from advisor.study.confirmation.baseline_watch import REMEASURE_EVERY

TRAINING_SHARE = 0.5  # configurations whose training run goes ahead (the README example's study: 8 of 20)


@dataclass(frozen=True)
class Estimate:
    """Seconds each remaining part of the study should take, and in all."""

    trials: int
    per_trial_s: float
    search_s: float
    more_seeds_s: float
    confirm_s: float

    @property
    def total_s(self) -> float:
        return self.search_s + self.more_seeds_s + self.confirm_s

    def text(self) -> str:
        parts = [f"{self.trials} trial(s) at ~{duration_text(self.per_trial_s)} each: {duration_text(self.search_s)}"]
        if self.more_seeds_s:
            parts.append(f"more seeds for undecided candidates: up to {duration_text(self.more_seeds_s)}")
        if self.confirm_s:
            parts.append(f"confirmation: up to {duration_text(self.confirm_s)}")
        return (f"about {duration_text(self.total_s)} from here on this machine (" + "; ".join(parts) +
                "), from the baseline's own times")


def estimate(base: TrialRecord, trials_left: int, *, two_stage: bool, seeds: int, confirm: bool, top: int,
             pairs: int) -> Estimate | None:
    """The estimate from the stored baseline ``base``; None when its times are not stored."""
    wall = float(base.get(WALL) or 0.0)
    probe = float(base.get(PROBE_WALL) or 0.0)
    training = float((base.get(TRAINING_RUN) or {}).get("wall_s") or 0.0)
    if two_stage and (probe <= 0 or training <= 0):
        return None
    if not two_stage and wall <= 0:
        return None
    per_trial = probe + TRAINING_SHARE * training if two_stage else wall
    one_probe = probe if two_stage else wall
    trials_left = max(0, trials_left)
    search = trials_left * per_trial + math.ceil(trials_left / REMEASURE_EVERY) * one_probe
    candidates = min(top, trials_left) if trials_left else 0
    more_seeds = candidates * max(0, seeds - 1) * (training if two_stage else wall)
    confirm_s = pairs * (candidates + 2) * one_probe if confirm and candidates else 0.0
    return Estimate(trials_left, per_trial, search, more_seeds, confirm_s)


def budget_plan(guess: Estimate | None, now: float, budget_end: float, budget_s: float) -> tuple[float, str]:
    """--budget: when the search must stop (monotonic seconds) so that the undecided
    candidates' seeds and the confirmation, as estimated, fit before ``budget_end``, and
    the note that says so. Those steps stop at ``budget_end`` whatever the estimate."""
    reserve = guess.more_seeds_s + guess.confirm_s if guess is not None else 0.0
    search_end = max(now, budget_end - reserve)
    left = search_end - now
    fits = (f", about {min(guess.trials, int(left // guess.per_trial_s))} of the {guess.trials} trials left"
            if guess is not None and guess.per_trial_s > 0 else "")
    spent = "" if budget_end - reserve > now else " (the budget is spent already: no more search)"
    return search_end, (f"--budget {duration_text(budget_s)}: the search runs {duration_text(left)} more{fits}; "
                        f"{duration_text(reserve)} is kept for the undecided candidates' seeds and the "
                        f"confirmation, which stop when the budget is spent{spent}")
