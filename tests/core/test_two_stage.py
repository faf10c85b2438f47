"""Two-stage evaluation's rules on synthetic numbers: dominance beyond noise, the probe
noise margins, fingerprints, and the metric gate."""

from __future__ import annotations

import math
import statistics

import pytest

from advisor.core.feasibility import single_value_floor, t_quantile
from advisor.core.two_stage import (
    DEFAULT_MEMORY_MARGIN,
    DEFAULT_THROUGHPUT_MARGIN,
    Gate,
    ProbeMargins,
    curve_points,
    dominates_beyond_noise,
    fingerprint_difference,
    gate_from,
)

M = ProbeMargins(0.15, 0.10)


@pytest.mark.parametrize("better, other, expected", [
    ((200.0, 10.0), (100.0, 20.0), True),     # better on both, far beyond noise
    ((114.0, 5.0), (100.0, 20.0), False),      # faster, but within the throughput noise
    ((115.0, 5.0), (100.0, 20.0), True),       # exactly the margin counts
    ((300.0, 19.0), (100.0, 20.0), False),     # smaller, but within the memory noise
    ((300.0, 30.0), (100.0, 20.0), False),     # faster but bigger: a trade-off, not dominance
    ((100.0, 20.0), (100.0, 20.0), False),     # itself
])
def test_dominance_needs_both_objectives_beyond_noise(better, other, expected):
    assert dominates_beyond_noise(better, other, M) is expected


def test_a_synthetic_front_keeps_every_trade_off():
    """Of probed configurations against two feasible ones, only those beaten on both
    objectives beyond noise by one of them need no training run."""
    feasible = [(1000.0, 100.0), (400.0, 40.0)]
    probed = {"slow and big": (300.0, 120.0), "small": (300.0, 30.0), "fast": (1500.0, 200.0),
              "near the first": (950.0, 105.0), "beaten by the second": (200.0, 60.0)}
    needless = {name for name, f in probed.items() if any(dominates_beyond_noise(g, f, M) for g in feasible)}
    assert needless == {"slow and big", "beaten by the second"}


def test_margins_come_from_the_baselines_repeated_measurements():
    assert ProbeMargins.from_baseline([100.0, 101.0], [10.0, 10.0]) == ProbeMargins()  # too few: defaults
    assert (ProbeMargins().throughput, ProbeMargins().memory) == (DEFAULT_THROUGHPUT_MARGIN, DEFAULT_MEMORY_MARGIN)
    quiet = ProbeMargins.from_baseline([100.0, 100.5, 99.5], [10.0, 10.0, 10.0])
    assert quiet.measured and quiet.throughput == 0.05 and quiet.memory == 0.02  # the floors
    noisy = ProbeMargins.from_baseline([100.0, 130.0, 80.0], [10.0, 11.0, 9.0])
    sd = math.sqrt(sum((math.log(v) - sum(map(math.log, [100, 130, 80])) / 3) ** 2
                       for v in [100, 130, 80]) / 2)
    assert noisy.throughput == pytest.approx(math.exp(2 * math.sqrt(2) * sd) - 1)
    assert "repeated measurements" in noisy.text()


def _fp(losses, state):
    return {"steps": len(losses), "losses": losses, "state": state}


def test_fingerprints_compare_losses_and_state_relatively():
    a = _fp([2.3, 2.1, 1.9], [["w", 1.0, 4.0, 16], ["bn.running_var", 3.0, 9.0, 1]])
    assert fingerprint_difference(a, a) == 0.0
    close = _fp([2.3, 2.1, 1.9000001], a["state"])
    assert fingerprint_difference(a, close) == pytest.approx(1e-7 / 1.9000001, rel=1e-3)
    twice_updated = _fp(a["losses"], [["w", 1.0, 4.0, 16], ["bn.running_var", 2.7, 7.29, 1]])
    assert fingerprint_difference(a, twice_updated) == pytest.approx((9.0 - 7.29) / 9.0)
    # a sum near zero is compared with the most it can be, sqrt(sum of squares x size)
    near_zero = _fp(a["losses"], [["w", 1e-6, 4.0, 16], a["state"][1]])
    assert fingerprint_difference(near_zero, _fp(a["losses"], [["w", -1e-6, 4.0, 16], a["state"][1]])) \
        == pytest.approx(2e-6 / 8.0)
    assert fingerprint_difference(a, _fp([2.3, 2.1], a["state"])) is None  # different steps
    assert fingerprint_difference(a, _fp(a["losses"], [["v", 1.0, 4.0, 16], a["state"][1]])) is None  # other tensors
    assert fingerprint_difference(a, _fp(a["losses"], [["w", 1.0, 4.0, 32], a["state"][1]])) is None  # other sizes
    assert fingerprint_difference(a, None) is None
    assert fingerprint_difference(a, _fp([2.3, 2.1, math.nan], a["state"])) is None


def test_curve_points_are_fractions_of_the_budget():
    assert curve_points(1000) == [250, 500, 750]
    assert curve_points(2) == [1, 2]


BASE = [{"samples": 250, "loss": 1.2, "metric": 0.60}, {"samples": 500, "loss": 0.8, "metric": 0.75},
        {"samples": 750, "loss": 0.6, "metric": 0.80}]
SEEDS = [[{"samples": 250, "loss": 1.3, "metric": 0.56}, {"samples": 500, "loss": 0.8, "metric": 0.76},
          {"samples": 750, "loss": 0.6, "metric": 0.81}],
         [{"samples": 250, "loss": 1.1, "metric": 0.64}, {"samples": 500, "loss": 0.8, "metric": 0.74},
          {"samples": 750, "loss": 0.6, "metric": 0.79}]]


def test_gate_floors_are_the_feasibility_rule_on_the_seeds_at_each_point():
    """At each point the floor is where one value is called infeasible against the seeds'
    values there (advisor.core.feasibility), at 5% / 3 points."""
    gate = gate_from(BASE, SEEDS, max_drop=0.01, initial_loss=2.3)
    assert gate is not None and gate.points == (250, 500, 750)
    first = [0.60, 0.56, 0.64]  # mean 0.60, sd 0.04, 2 degrees of freedom
    half = t_quantile(1 - 0.05 / 3, 2) * 0.04 * (1 + 1 / 3) ** 0.5
    assert gate.floors[0] == pytest.approx(statistics.fmean(first) - 0.01 - half)
    assert gate.floors[0] == pytest.approx(single_value_floor(first, 0.01, 0.05 / 3))
    for floor, value in zip(gate.floors, (0.60, 0.75, 0.80)):  # every one below the allowed drop
        assert floor < value - 0.01
    assert gate.loss_ceiling == pytest.approx(4.6)
    assert gate_from(BASE, [], 0.01, 2.3).floors == (None, None, None)  # no seeds: divergence only
    assert gate_from([], SEEDS, 0.01) is None


def test_gate_verdicts():
    gate = gate_from(BASE, SEEDS, max_drop=0.01, initial_loss=2.3)
    assert gate.verdict(0, 0.55, 1.5) is None  # behind, but within the noise
    assert gate.behind(1, 0.70) is None  # 5 points behind, seeds 1 point apart: within the noise of 3 seeds
    assert gate.behind(1, 0.66) is not None and gate.verdict(1, 0.66, 0.9) is None  # one point behind: go on
    assert "behind the baseline beyond noise at two points in a row" in gate.verdict(1, 0.66, 0.9, behind_before=True)
    assert "baseline 0.7500 there" in gate.verdict(1, 0.66, 0.9, behind_before=True)
    assert gate.verdict(1, 0.80, 0.9, behind_before=True) is None  # caught up
    assert gate.verdict(2, 0.95, 0.3) is None  # ahead
    assert gate.verdict(0, 0.60, math.inf).startswith("diverged")
    assert gate.verdict(0, 0.60, 5.0).startswith("diverged")
    assert Gate.from_dict(gate.to_dict()) == gate
    assert Gate.from_dict(None) is None
