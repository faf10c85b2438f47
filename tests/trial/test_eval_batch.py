"""The validation metric of every trial is taken in the study's batch (the baseline's), so a
metric that does not average over batches (macro-F1, or here one that reads the batch's own
size) reads the same whatever a configuration's batch_size; a batch weighs its samples."""

from __future__ import annotations

from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialSettings
from advisor.trial.entry import run_trial
from advisor.workload.contract import load_workload

BATCH_SIZED = '''import torch
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 32}
METRIC = {"name": "batch share", "higher_is_better": True, "fraction": True}


def model():
    return torch.nn.Linear(4, 3)


def datasets():
    x = torch.randn(128, 4, generator=torch.Generator().manual_seed(0))
    y = torch.arange(128) % 3
    return TensorDataset(x, y), TensorDataset(x[:40], y[:40])


def metric(output, target):
    return len(target) / 100  # not an average over samples: a batch of 32 reads 0.32, one of 8 reads 0.08
'''


def _score(path, batch_size, eval_batch_size):
    settings = TrialSettings(train_samples=64, max_timing_s=0.2, part="training", eval_batch_size=eval_batch_size)
    result = run_trial(TrialPayload.of(load_workload(path), TrialConfig(batch_size=batch_size), settings))
    assert result.ok, result.failure_message
    return result.score


def test_the_metric_is_taken_in_the_studys_batch_not_the_trials(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(BATCH_SIZED)
    weighted = (32 * 0.32 + 8 * 0.08) / 40  # 40 validation items in batches of 32 and 8, each weighed by its size
    assert [_score(path, bs, 32) for bs in (8, 16, 64)] == [weighted] * 3
    assert _score(path, 8, None) == 0.08  # without the study's batch: the trial's own (as before)
