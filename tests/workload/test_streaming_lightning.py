"""A Lightning file whose train_dataloader reads a stream (an IterableDataset): accepted,
its schedulers stepped as Lightning's own Trainer steps them on the same stream (an epoch
ends when the stream does), a trial trained on it; a streaming val_dataloader refused."""

from __future__ import annotations

import pytest
from test_lightning import DATA, METRIC, _our_run, lightning_file

from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialSettings
from advisor.trial.entry import run_trial
from advisor.workload.contract import load_workload
from advisor.workload.preflight import preflight

from conftest import exit_status, skip_without

skip_without("lightning")

STREAM = '''
class Stream(torch.utils.data.IterableDataset):
    """The same 40 items as Data's training set, as a stream."""

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(48, 8, generator=g)
        return iter(list(zip(x[:40], x[:40, :3].argmax(1))))
'''
STREAM_DATA = DATA.replace("return DataLoader(self.train_set, batch_size=8)",
                           "return DataLoader(Stream(), batch_size=8)") + STREAM


def test_a_streaming_train_dataloader_is_accepted(tmp_path):
    workload = load_workload(lightning_file(tmp_path, data=STREAM_DATA))
    facts = preflight(workload)
    assert facts["train_size"] is None and facts["train_stream"] and facts["val_size"] == 8
    assert workload.baseline == {"batch_size": 8}


def test_schedulers_step_as_lightning_steps_them_on_a_stream(tmp_path):
    """Epoch-interval and step-interval schedulers over a stream of 5 batches a pass give
    the same learning rate at every step as Lightning's Trainer on the same stream."""
    import lightning as L

    workload = load_workload(lightning_file(tmp_path, data=STREAM_DATA))
    _, _, step, prepared, optimizer, batches = _our_run(workload, batch_size=8, steps=17)
    assert workload.start_trial is not None and step.lit.trainer.max_epochs == -1
    for _ in range(17):
        x, y = next(batches)
        prepared.train_step(x, y, workload.loss, optimizer)
    module = workload.module
    lit = module.Net()
    L.Trainer(max_steps=17, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0).fit(lit, module.Data())
    assert len(step.lit.lrs) == len(lit.lrs) == 17
    assert step.lit.lrs == pytest.approx(lit.lrs, rel=1e-12)
    assert len(set(lit.lrs)) > 4


def test_a_trial_trains_on_a_streaming_train_dataloader(tmp_path):
    workload = load_workload(lightning_file(tmp_path, data=STREAM_DATA))
    result = run_trial(TrialPayload.of(workload, TrialConfig(batch_size=8),
                                       TrialSettings(train_samples=200, max_timing_s=0.5)))
    assert result.ok, result.failure_message
    assert result.train_samples == 200 and result.score is not None


def test_a_streaming_val_dataloader_is_refused(tmp_path, workdir, capsys):
    data = STREAM_DATA.replace("return DataLoader(self.val_set, batch_size=8)", "return DataLoader(Stream(), batch_size=8)")
    path = lightning_file(tmp_path, data=data, extra=METRIC)
    assert exit_status(["tune", str(path), "--no-tui", "--trials", "2", "--train-samples", "64"]) == 2
    err = capsys.readouterr().err
    assert "Data.val_dataloader(): its dataset must be map-style (with __len__ and __getitem__), found a stream" in err
    assert not list(workdir.glob("*.db"))
