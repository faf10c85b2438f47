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
  With ``--budget`` the confirmation is sized to at most ``CONFIRM_SHARE`` of the budget
  (``plan_confirmation``): first fewer candidates, down to one per pick, then fewer pairs,
  down to ``MIN_PAIRS``, then fewer candidates, down to one; when even one candidate's
  ``MIN_PAIRS`` pairs do not fit, the study is not confirmed and says so.

Estimates, not promises: a trial's time moves with its configuration (a bigger batch, a
compile), and a neighbour slows the machine; the parts are given so a user can see which
one to cut (``--trials``, ``--train-samples``, ``--no-confirm``, ``--pairs``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from advisor.core.pairs import MIN_PAIRS
from advisor.core.picks import PICKS
from advisor.core.stored import PROBE_WALL, TRAINING_RUN, WALL, TrialRecord
from advisor.core.units import duration_text
from advisor.study.confirmation.baseline_watch import REMEASURE_EVERY
from advisor.study.options.tune_options import ConfirmOptions

TRAINING_SHARE = 0.5  # configurations whose training run goes ahead (the README example's study: 8 of 20)
CONFIRM_SHARE = 0.25  # with --budget: the share of it the paired confirmation may take


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
             pairs: int, confirm_top: int | None = None) -> Estimate | None:
    """The estimate from the stored baseline ``base``; None when its times are not stored.
    ``top``: the front candidates trained with more seeds, and confirmed unless
    ``confirm_top`` says otherwise (a --budget's plan)."""
    training = float((base.get(TRAINING_RUN) or {}).get("wall_s") or 0.0)
    one_probe = one_probe_s(base, two_stage)
    if one_probe <= 0 or (two_stage and training <= 0):
        return None
    per_trial = one_probe + TRAINING_SHARE * training if two_stage else one_probe
    trials_left = max(0, trials_left)
    search = trials_left * per_trial + math.ceil(trials_left / REMEASURE_EVERY) * one_probe
    candidates = min(top, trials_left) if trials_left else 0
    more_seeds = candidates * max(0, seeds - 1) * (training if two_stage else one_probe)
    confirming = min(top if confirm_top is None else confirm_top, trials_left)
    confirm_s = confirmation_s(confirming, pairs, one_probe) if confirm and confirming else 0.0
    return Estimate(trials_left, per_trial, search, more_seeds, confirm_s)


def one_probe_s(base: TrialRecord, two_stage: bool) -> float:
    """What one of the study's probes takes (a confirmation run is one): the baseline's probe
    wall, or its whole run's without two-stage evaluation; 0.0 when not stored. The
    baseline is the study's first trial: its process start included the fork server's own
    (torch and model.py's imports, seconds where a later trial's fork takes milliseconds),
    which is left out unless every trial starts cold (``ADVISOR_COLD_TRIALS=1``); so is its
    memory plan, which a later trial makes only when its memory is at stake (14.6 s of the
    36 s baseline probe of GPT-2 on an H200, where the later probes took 7-11 s)."""
    from advisor.trial.forkserver import cold

    wall = float(base.get(PROBE_WALL) or 0.0) if two_stage else float(base.get(WALL) or 0.0)
    phases = base.get("phase_s") or {}
    started = 0.0 if cold() else float(phases.get("process_start") or 0.0)
    once = started + float(phases.get("estimate") or 0.0)
    return wall - once if 0 < once < wall else wall


def confirmation_s(top: int, pairs: int, one_probe: float) -> float:
    """``pairs`` rounds of ``top`` candidates, each round with its own two baseline runs."""
    return pairs * (top + 2) * one_probe


@dataclass(frozen=True)
class ConfirmPlan:
    """The confirmation a --budget leaves room for: ``options`` (None: none fits) and the note."""

    options: ConfirmOptions | None
    text: str


def plan_confirmation(asked: ConfirmOptions, one_probe: float, budget_s: float) -> ConfirmPlan:
    """Size the paired confirmation to at most ``CONFIRM_SHARE`` of ``budget_s`` seconds:
    what was asked (``--confirm-top``, ``--pairs``) when it fits; else fewer candidates,
    down to one per pick; then fewer pairs, down to ``MIN_PAIRS`` (never more than asked);
    then fewer candidates, down to one. A budget is never a reason to confirm more than asked."""
    if one_probe <= 0:  # the baseline's times are not stored: nothing to size it by
        return ConfirmPlan(asked, "")
    room = CONFIRM_SHARE * budget_s
    top, pairs = asked.top, asked.max_pairs
    floor_pairs = min(pairs, MIN_PAIRS)

    def fits() -> bool:
        return confirmation_s(top, pairs, one_probe) <= room

    while not fits() and top > min(asked.top, len(PICKS)):
        top -= 1
    while not fits() and pairs > floor_pairs:
        pairs -= 1
    while not fits() and top > 1:
        top -= 1
    share = f"a quarter of --budget {duration_text(budget_s)}"
    if not fits():
        least = confirmation_s(1, floor_pairs, one_probe)
        return ConfirmPlan(None, (
            f"no paired confirmation: one candidate's {floor_pairs} pairs would take ~{duration_text(least)}, more "
            f"than {share}; the front's figures stay unconfirmed (`advisor confirm` confirms them later), or a "
            f"--budget of {duration_text(least / CONFIRM_SHARE)} or more leaves room for it"))
    planned = replace(asked, top=top, max_pairs=pairs)
    cut = "" if planned == asked else (
        f", cut from --confirm-top {asked.top} and --pairs {asked.max_pairs} "
        f"(~{duration_text(confirmation_s(asked.top, asked.max_pairs, one_probe))})")
    return ConfirmPlan(planned, f"confirmation planned for at most {top} candidate(s), up to {pairs} pairs each: "
                                f"up to ~{duration_text(confirmation_s(top, pairs, one_probe))}, within {share}{cut}")


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
