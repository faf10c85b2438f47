"""Trials on a training set that is a stream (tests/workloads/streaming.py): the sample
budget counted from the stream, which is started again when it ends (the workload told
each epoch's end); an infinite stream; a stream shorter than one batch; the same data for
the same seed; two gloo ranks that train on disjoint halves of it; the memory estimate."""

from __future__ import annotations

import pytest
import torch

from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialSettings
from advisor.trial.entry import run_trial
from advisor.trial.loop import run_configuration
from advisor.workload.contract import load_datasets, load_workload

from conftest import WORKLOADS, run_as_trial

STREAMING = WORKLOADS / "streaming.py"
ONE_PASS = 512  # the workload's stream, by default


def _in_this_process(config, part, train_samples, epochs=None):
    """The trial's loop in this process, so that the stream's READ counter is readable."""
    workload = load_workload(STREAMING)
    datasets = load_datasets(workload)
    workload.module.READ.update(items=0, passes=0)  # what load_datasets' check read
    if epochs is not None:
        workload.epoch_end = epochs.append
    settings = TrialSettings(train_samples=train_samples, max_timing_s=0.5, part=part)
    result = run_configuration(TrialPayload.of(workload, TrialConfig(**config), settings), workload, {}, datasets)
    assert result.ok, result.failure_message
    return result, workload.module.READ


def test_the_sample_budget_is_counted_from_the_stream_started_again_when_it_ends():
    epochs: list[int] = []
    result, read = _in_this_process({"batch_size": 32}, "training", 1000, epochs)
    assert result.train_samples == 992  # round(1000 / 32) = 31 full batches
    assert read == {"items": 992, "passes": 2}  # 16 batches of the first pass, 15 of the second
    assert epochs == [0]  # the first epoch's end, told when the second pass started
    assert result.score is not None and result.telemetry["curve"]


def test_an_infinite_stream_is_one_epoch(monkeypatch):
    monkeypatch.setenv("ADVISOR_TEST_STREAM_ITEMS", "-1")
    epochs: list[int] = []
    result, read = _in_this_process({"batch_size": 64}, "full", 2048, epochs)
    assert result.train_samples == 2048 and result.throughput > 0
    assert read["passes"] == 1 and read["items"] >= 2048 and epochs == []


def test_the_same_seed_reads_the_same_stream():
    first, _ = _in_this_process({"batch_size": 32}, "training", 640)
    again, _ = _in_this_process({"batch_size": 32}, "training", 640)
    assert (first.score, first.final_loss) == (again.score, again.final_loss)


def test_a_batch_larger_than_the_stream_is_unsupported(monkeypatch):
    monkeypatch.setenv("ADVISOR_TEST_STREAM_ITEMS", "20")
    result = run_trial(TrialPayload.of(load_workload(STREAMING), TrialConfig(batch_size=32),
                                       TrialSettings(train_samples=256, max_timing_s=0.5)))
    assert not result.ok and result.failure_class == "unsupported"
    assert ("batch size 32 per rank is larger than one pass of the training stream (Stream): the pass ended "
            "before one full batch") in result.failure_message


def test_the_memory_estimate_reads_its_batch_from_the_stream():
    from advisor.trial.estimate import estimate_here

    payload = TrialPayload.of(load_workload(STREAMING), TrialConfig(batch_size=64), TrialSettings(train_samples=64))
    found = estimate_here(payload)
    assert found["peak_bytes"] > 0
    assert found["by_kind"]["activations"] >= 64 * 32 * 4  # the hidden layer's fp32 values for 64 rows


LOGGED = '''

def collate(items):
    """The training items each rank batches, logged by rank (evaluation runs without grad)."""
    import os
    from torch.utils.data import default_collate

    rank = os.environ.get("RANK")
    if rank is not None and torch.is_grad_enabled():
        with open(os.path.join(os.environ["STREAM_LOG"], f"rank-{rank}.txt"), "a") as fh:
            fh.writelines(f"{float(x[0])!r}\\n" for x, _ in items)
    return default_collate(items)
'''


@pytest.mark.timeout(240)
def test_two_gloo_ranks_train_on_disjoint_items_of_the_stream(tmp_path, monkeypatch):
    path = tmp_path / "streaming_logged.py"
    path.write_text(STREAMING.read_text() + LOGGED)
    monkeypatch.setenv("STREAM_LOG", str(tmp_path))
    workload = load_workload(path)
    result = run_as_trial(TrialPayload.of(workload, TrialConfig(batch_size=32, parallelism="ddp", devices=2),
                                       TrialSettings(train_samples=768, part="training")))
    assert result.ok, result.failure_message
    assert result.train_samples == 768
    ranks = [[float(v) for v in (tmp_path / f"rank-{r}.txt").read_text().split()] for r in (0, 1)]
    stream = [float(x[0]) for x, _ in load_datasets(workload)[0]]  # one pass: 512 items
    assert len(ranks[0]) == len(ranks[1]) == 384  # 24 steps of 16 items a rank
    # rank r keeps items r, r + 2, ... of each pass: the second pass starts the stream again
    assert ranks[0] == (stream[0::2] * 2)[:384] and ranks[1] == (stream[1::2] * 2)[:384]
    assert not set(ranks[0][:256]) & set(ranks[1][:256])  # within a pass, no item on both ranks
    assert torch.isfinite(torch.tensor(result.final_loss))
