"""run_trial in this process: what one trial measures, and failures as data."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialSettings
from advisor.trial.entry import run_trial
from advisor.workload.contract import load_workload

from conftest import EXAMPLES, WORKLOADS


def payload(path, config, train_samples=600):
    return TrialPayload.of(load_workload(path), TrialConfig(**config),
                           TrialSettings(train_samples=train_samples, max_timing_s=2.0))


def test_trial_measures_throughput_memory_accuracy():
    r = run_trial(payload(EXAMPLES / "digits_mlp.py", {"batch_size": 64}))
    assert r.ok, r.failure_message
    assert r.throughput > 0 and r.step_time_median_s > 0
    assert r.throughput == pytest.approx(64 / r.step_time_median_s)
    assert r.timed_steps >= 10
    assert 0.3 < r.score <= 1.0  # 600 samples of training beat chance (0.1) clearly
    assert r.peak_memory_bytes > 0  # the model, its optimizer state and activations
    assert r.train_samples == 576  # round(600 / 64) = 9 steps of 64: whole batches only
    assert {"load", "build", "train", "eval", "total"} <= set(r.phase_s)
    assert r.pid > 0 and r.host


def test_same_samples_across_batch_sizes():
    """Accuracy is compared after (nearly) the same number of samples whatever the batch size."""
    small = run_trial(payload(EXAMPLES / "digits_mlp.py", {"batch_size": 16}, 1024))
    large = run_trial(payload(EXAMPLES / "digits_mlp.py", {"batch_size": 256}, 1024))
    assert small.train_samples == large.train_samples == 1024


def test_trials_are_deterministic_in_accuracy():
    a = run_trial(payload(EXAMPLES / "digits_mlp.py", {"batch_size": 32}))
    b = run_trial(payload(EXAMPLES / "digits_mlp.py", {"batch_size": 32}))
    assert a.ok and a.score == b.score  # same seed, same data order, same init


@pytest.mark.parametrize("batch_size,failure_class,text", [
    (512, "oom", "out of memory"),
    (32, "error", "user code failed at batch 32"),
    (128, "error", "loss became nan"),
])
def test_failures_are_results(batch_size, failure_class, text):
    r = run_trial(payload(WORKLOADS / "faulty.py", {"batch_size": batch_size}))
    assert r.ok is False
    assert r.failure_class == failure_class
    assert text in r.failure_message


def test_unsupported_technique_is_recorded():
    r = run_trial(payload(EXAMPLES / "digits_mlp.py", {"batch_size": 64, "channels_last": True}))
    assert (r.ok, r.failure_class) == (False, "unsupported")
    assert "2-D convolutions" in r.failure_message


def test_batch_larger_than_training_set_is_unsupported():
    r = run_trial(payload(WORKLOADS / "valid.py", {"batch_size": 1024}))
    assert r.failure_class == "unsupported" and "larger than the training set" in r.failure_message


def test_changed_workload_is_refused(tmp_path):
    path = tmp_path / "model.py"
    path.write_text((WORKLOADS / "valid.py").read_text())
    p = payload(path, {"batch_size": 32})
    path.write_text(path.read_text() + "\n# edited\n")
    r = run_trial(p)
    assert r.failure_class == "error" and "changed since the study started" in r.failure_message


def test_payload_survives_the_json_a_rank_reads():
    p = payload(EXAMPLES / "digits_mlp.py", {"batch_size": 32, "parallelism": "ddp", "devices": 2})
    assert TrialPayload.from_dict(p.to_dict()) == p
    tuned = replace(p, interference_limit=0.08, timing_tolerance=0.02)  # what the study sets from its noise
    assert TrialPayload.from_dict(json.loads(json.dumps(tuned.to_dict()))) == tuned


@pytest.mark.parametrize("batch_size,first_line,frames", [
    (32, "model.py called sys.exit(7) during the trial", ["in loss", "sys.exit(7)", "SystemExit: 7"]),
    (48, "model.py raised KeyboardInterrupt itself during the trial", ["in forward", "raise KeyboardInterrupt"]),
    (24, "ValueError: rejected a batch of 24", ["in forward", "reject(x)", "in reject"]),
])
def test_the_users_own_failure_is_a_result_told_in_the_users_frames(batch_size, first_line, frames):
    """sys.exit() and KeyboardInterrupt from model.py end the trial as a recorded failure,
    not the trial process; the message shows model.py's frames and none of advisor's (or
    torch's, between two of the user's)."""
    r = run_trial(payload(WORKLOADS / "exits.py", {"batch_size": batch_size}))
    assert (r.ok, r.failure_class) == (False, "error")
    assert r.failure_message.startswith(first_line), r.failure_message
    assert all(f in r.failure_message for f in frames), r.failure_message
    assert "exits.py" in r.failure_message
    assert "advisor/" not in r.failure_message and "torch/nn/modules" not in r.failure_message
