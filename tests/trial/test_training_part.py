"""Two-stage evaluation in the trial process (in this process, as ``run_trial`` runs it):
the training run's learning curve and gate on real models that really diverge and
really lag, and the probe's fingerprint on knobs that do and do not change the numerics."""

from __future__ import annotations

from dataclasses import replace

import pytest

from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialSettings
from advisor.core.two_stage import REUSE_TOLERANCE, fingerprint_difference, gate_from
from advisor.trial.entry import run_trial
from advisor.workload.contract import load_workload

from conftest import EXAMPLES, WORKLOADS

SETTINGS = TrialSettings(train_samples=4096, max_timing_s=0.5)
MLP = EXAMPLES / "digits_mlp.py"


def run(path, config, part, seed=0, gate=None, settings=SETTINGS):
    payload = TrialPayload.of(load_workload(path), TrialConfig(**config), replace(settings, part=part, seed=seed),
                              gate.to_dict() if gate is not None else None)
    result = run_trial(payload)
    assert result.ok, result.failure_message
    return result


@pytest.fixture(scope="module")
def gate():
    """The gate as a study builds it: the baseline's training runs with three seeds."""
    runs = [run(MLP, {"batch_size": 64}, "training", seed=s) for s in (0, 1, 2)]
    return gate_from(runs[0].telemetry["curve"], [r.telemetry["curve"] for r in runs[1:]], 0.01,
                     runs[0].telemetry["initial_loss"])


def test_the_training_part_trains_the_budget_with_a_curve_and_times_nothing():
    trained = run(MLP, {"batch_size": 64}, "training")
    full = run(MLP, {"batch_size": 64}, "full")
    assert trained.throughput is None and trained.timed_steps == 0
    assert trained.train_samples == full.train_samples == 4096
    assert trained.score == full.score  # the curve's evaluations change nothing in the training
    curve = trained.telemetry["curve"]
    assert [p["samples"] for p in curve] == [1024, 2048, 3072]
    assert curve[0]["metric"] < curve[-1]["metric"] <= 1.0 and curve[0]["loss"] > curve[-1]["loss"]
    assert trained.telemetry["early_stop"] is None and trained.telemetry["initial_loss"] > curve[0]["loss"]
    assert {"train", "curve", "eval"} <= set(trained.phase_s)


def test_a_probe_leaves_a_fingerprint_and_no_metric():
    p = run(MLP, {"batch_size": 64}, "probe")
    assert p.score is None and p.throughput > 0
    fp = p.telemetry["fingerprint"]
    assert fp["steps"] == 5 and len(fp["losses"]) == 5
    assert [s[0] for s in fp["state"]] == ["1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"]


def test_the_gate_stops_a_model_that_really_diverges(gate):
    """An absurd learning rate (tests/workloads/diverging.py, the same network and data)."""
    r = run(WORKLOADS / "diverging.py", {"batch_size": 64}, "training", gate=gate)
    stop = r.telemetry["early_stop"]
    assert stop is not None and stop["reason"].startswith("diverged"), r.telemetry["curve"]
    assert stop["fraction"] < 1 and r.train_samples < 4096
    assert r.score == r.telemetry["curve"][-1]["metric"]  # evaluated where it stopped


def test_the_gate_stops_a_configuration_that_really_lags(gate):
    """A batch of 512 at the same sample budget takes 8 steps where the baseline takes 64:
    after 1,024 and 2,048 samples it has taken 2 and 4 and is far behind both times; it
    would end far below the baseline (checked: the full budget gives it no feasible
    metric)."""
    r = run(MLP, {"batch_size": 512}, "training", gate=gate)
    stop = r.telemetry["early_stop"]
    assert stop is not None and stop["reason"].startswith("behind the baseline beyond noise at two points in a row")
    assert stop["samples"] == 2048 and stop["baseline_metric"] == gate.baseline_metrics[1]
    unstopped = run(MLP, {"batch_size": 512}, "training")
    assert unstopped.score < gate.baseline_metrics[-1] - 0.01  # really lagging: infeasible at the end too


def test_the_gate_lets_a_configuration_that_keeps_up_finish(gate):
    r = run(MLP, {"batch_size": 32}, "training", gate=gate)
    assert r.telemetry["early_stop"] is None and r.train_samples == 4096


def _fingerprint(path, config):
    return run(path, config, "probe", settings=replace(SETTINGS, train_samples=600)).telemetry["fingerprint"]


@pytest.mark.parametrize("path, knob, reusable", [
    (MLP, {"threads": 1}, True),
    (MLP, {"num_workers": 2}, True),
    (MLP, {"activation_checkpointing": True}, True),
    (EXAMPLES / "digits_cnn.py", {"activation_checkpointing": True}, True),  # BatchNorm's statistics included
    (EXAMPLES / "digits_cnn.py", {"channels_last": True}, False),  # other kernels: AdamW amplifies the rounding
    (MLP, {"precision": "bf16"}, False),
])
def test_the_fingerprint_tells_which_knobs_leave_the_numerics_alone(path, knob, reusable):
    """The evidence behind reuse: on these models these knobs give the same first training
    steps (or not) to within the tolerance."""
    base = _fingerprint(path, {"batch_size": 64})
    diff = fingerprint_difference(base, _fingerprint(path, {"batch_size": 64, **knob}))
    assert diff is not None and (diff <= REUSE_TOLERANCE) is reusable, diff
