"""Feasibility verdicts (advisor/core/feasibility.py) proven without the machine's noise:
simulated seeds with a known true difference, so the error rates are checked against the
truth. Fixed random seeds: the figures are the same on every run."""

from __future__ import annotations

import random
import statistics

import pytest

from advisor.core.feasibility import (
    FEASIBLE,
    INFEASIBLE,
    UNDECIDED,
    pooled_sd,
    resolution,
    seeds_to_resolve,
    single_value_floor,
    verdict,
)
from advisor.core.student import t95, t_quantile

REPLICATES = 4000
ALLOWED = 0.01


def simulate(true_drop: float, sd: float, seeds: int, baseline_seeds: int, seed: int = 0) -> dict[str, float]:
    """Share of each verdict over replicates of a configuration whose true metric is
    ``true_drop`` below the baseline's, both drawn with seed-to-seed noise ``sd``."""
    rng = random.Random(seed)
    counts = {FEASIBLE: 0, INFEASIBLE: 0, UNDECIDED: 0}
    for _ in range(REPLICATES):
        base = [0.9 + rng.gauss(0, sd) for _ in range(baseline_seeds)]
        mine = [0.9 - true_drop + rng.gauss(0, sd) for _ in range(seeds)]
        counts[verdict(mine, base, ALLOWED).kind] += 1
    return {k: v / REPLICATES for k, v in counts.items()}


def old_rule_false_infeasible(true_drop: float, sd: float, seed: int = 0) -> float:
    """The rule before: one seed against the baseline's seed 0 alone, no noise allowed for."""
    rng = random.Random(seed)
    calls = sum((0.9 + rng.gauss(0, sd)) - (0.9 - true_drop + rng.gauss(0, sd)) > ALLOWED for _ in range(REPLICATES))
    return calls / REPLICATES


MC = 3 * (0.05 * 0.95 / REPLICATES) ** 0.5  # three Monte Carlo standard errors of a 5% rate


@pytest.mark.parametrize("sd", [0.002, 0.01, 0.05, 0.19])
@pytest.mark.parametrize("seeds", [1, 3])
@pytest.mark.parametrize("true_drop", [0.0, ALLOWED / 2, ALLOWED])
def test_at_most_5_percent_false_infeasible_calls(true_drop, seeds, sd):
    """Feasible in truth (the drop within the allowed one): called infeasible at most 5% of
    the time at any noise, exactly 5% at the boundary, 1 or 3 seeds against 3."""
    rates = simulate(true_drop, sd, seeds, baseline_seeds=3)
    assert rates[INFEASIBLE] <= 0.05 + MC


@pytest.mark.parametrize("seeds", [1, 3])
def test_the_old_rule_fails_the_same_check(seeds):
    """One seed against seed 0 called a configuration with the baseline's true metric
    infeasible about half the time once the noise exceeds the allowed drop."""
    assert old_rule_false_infeasible(0.0, sd=0.05) > 0.4


@pytest.mark.parametrize("true_drop", [ALLOWED * 1.5, ALLOWED * 3])
def test_at_most_5_percent_false_feasible_calls(true_drop):
    """Infeasible in truth: called feasible at most 5% of the time (the mirror bound)."""
    assert simulate(true_drop, 0.01, seeds=3, baseline_seeds=3)[FEASIBLE] <= 0.05 + MC


def test_quiet_metrics_decide_and_noisy_ones_stay_undecided():
    quiet_same = simulate(0.0, 0.001, seeds=1, baseline_seeds=3)
    quiet_worse = simulate(0.05, 0.001, seeds=1, baseline_seeds=3)
    noisy_same = simulate(0.0, 0.19, seeds=1, baseline_seeds=3)
    assert quiet_same[FEASIBLE] > 0.99 and quiet_worse[INFEASIBLE] > 0.99
    assert noisy_same[UNDECIDED] > 0.85  # +-19 pt against 1 pt: the noise cannot tell


def test_more_seeds_decide_more():
    one, three = (simulate(0.0, 0.004, seeds=n, baseline_seeds=3)[FEASIBLE] for n in (1, 3))
    assert three > one


def test_a_verdict_from_known_values():
    v = verdict([0.90], [0.92, 0.88, 0.90], 0.01)  # d = 0, sd 0.02 on 2 df
    assert v.difference == pytest.approx(0.0) and v.kind == UNDECIDED and v.difference >= -v.allowed
    half = t95(2) * 0.02 * (1 + 1 / 3) ** 0.5
    assert (v.low, v.high) == (pytest.approx(-half), pytest.approx(half))
    assert v.text(lambda x: f"{100 * x:+.1f} pt") == ("undecided: +0.0 pt, its 95% bounds -6.7 pt to +6.7 pt "
                                                      "straddle -1.0 pt: within the noise with 1 seed(s) against "
                                                      "the baseline's 3")


def test_a_bound_that_rounds_to_the_edge_is_just_past_it():
    """A review read "-1.0 pt below -1.0 pt": the bound, rounded as the edge is, equals it."""
    from advisor.core.feasibility import Verdict

    pt = lambda x: f"{100 * x:+.1f} pt"  # noqa: E731
    near = Verdict(INFEASIBLE, -0.03, -0.05, -0.0104, 0.01, 1, 3)
    assert near.text(pt) == "infeasible: -3.0 pt, its 95% upper bound just below -1.0 pt"
    far = Verdict(INFEASIBLE, -0.03, -0.05, -0.02, 0.01, 1, 3)
    assert far.text(pt) == "infeasible: -3.0 pt, its 95% upper bound -2.0 pt below -1.0 pt"


def test_without_noise_the_point_estimate_decides():
    assert verdict([0.895], [0.90], 0.01).kind == FEASIBLE
    worse = verdict([0.885], [0.90], 0.01)
    assert worse.kind == INFEASIBLE and not worse.noise_known and "noise is not known" in worse.text()
    assert verdict([0.9, 0.9], [0.9, 0.9, 0.9], 0.0).kind == FEASIBLE  # identical arithmetic: no spread


def test_pooled_sd_and_t():
    sd, df = pooled_sd([1.0, 3.0], [2.0, 4.0, 6.0])
    assert df == 3 and sd == pytest.approx(((2 + 8) / 3) ** 0.5)
    assert t95(1) == pytest.approx(6.314, abs=0.001) and t95(1000) == pytest.approx(1.645, abs=0.003)
    assert statistics.fmean([t95(d) for d in (29, 30, 31)]) == pytest.approx(1.699, abs=0.002)
    assert t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-4)  # the tables' values
    assert t_quantile(0.99, 5) == pytest.approx(3.3649, abs=1e-4)
    assert t_quantile(0.995, 1) == pytest.approx(63.657, abs=1e-3)
    with pytest.raises(ValueError):
        t95(0)


def test_the_single_value_floor_is_the_verdicts_boundary():
    base = [0.92, 0.88, 0.90]
    floor = single_value_floor(base, 0.01)
    assert verdict([floor - 1e-9], base, 0.01).kind == INFEASIBLE
    assert verdict([floor + 1e-9], base, 0.01).kind == UNDECIDED
    assert single_value_floor([0.9], 0.01) is None and single_value_floor([0.9, 0.9], 0.01) is None


def test_resolution_and_the_seeds_that_would_decide():
    base = [0.95, 0.94, 0.96]  # sd 0.01
    half = resolution(base)
    assert half == pytest.approx(t95(2) * 0.01 * (1 + 1 / 3) ** 0.5)
    assert verdict([0.9 + half - 0.01 + 1e-9 + 0.05], base, 0.01).kind == FEASIBLE  # just clears it
    assert resolution([0.9]) is None and resolution([0.9, 0.9]) is None
    n = seeds_to_resolve(base, 0.01)
    assert n is not None and t95(2 * n - 2) * 0.01 * (2 / n) ** 0.5 <= 0.01
    assert t95(2 * n - 4) * 0.01 * (2 / (n - 1)) ** 0.5 > 0.01  # the fewest that do
    assert seeds_to_resolve([0.5, 0.9, 0.1], 0.001) is None  # beyond any sensible count
    assert seeds_to_resolve([0.9, 0.9], 0.01) == 1


def test_a_lower_is_better_metric_reads_in_its_own_terms_and_order():
    """An MSE: scores are its negation, and the text gives the metric's own differences,
    bounds and their order ('upper bound ... below' where higher is worse)."""
    from advisor.core.metric import MetricSpec

    mse = MetricSpec(name="mse", higher_is_better=False, fraction=False, unit="units^2")
    base = [-2.00, -2.02, -1.98]  # scores: MSE 2.00, 2.02, 1.98
    undecided = verdict([-2.05], base, 0.01)  # MSE 2.05: 0.05 worse, with a noise of +-0.02 a seed
    text = undecided.text(mse.delta_text, mse.higher_is_better)
    low, high = -undecided.high, -undecided.low  # the MSE difference's bounds
    assert text.startswith(f"undecided: +0.05 units^2, its 95% bounds {mse.delta_text(undecided.high)} to "
                           f"{mse.delta_text(undecided.low)} straddle +0.01 units^2")
    assert low < 0.01 < high and mse.delta_text(undecided.high).startswith("-")
    better = verdict([-1.5, -1.52, -1.48], base, 0.01)  # MSE 1.5: feasible, its upper bound below +0.01
    assert better.text(mse.delta_text, mse.higher_is_better).startswith("feasible: -0.5 units^2, its 95% upper "
                                                                       "bound -0.")
    assert " below +0.01 units^2" in better.text(mse.delta_text, mse.higher_is_better)
    worse = verdict([-3.0, -3.02, -2.98], base, 0.01)
    assert "its 95% lower bound +0.9" in worse.text(mse.delta_text, mse.higher_is_better)
    assert " above +0.01 units^2" in worse.text(mse.delta_text, mse.higher_is_better)
    assert mse.amount_text(-0.233) == mse.amount_text(0.233) == "0.233 units^2"
    assert MetricSpec().amount_text(-0.015) == "1.5 pt"
