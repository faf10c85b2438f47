"""An inference trial's per-request latency (p50 / p95 / p99 at its batch, and at batch 1;
``advisor.core.latency``) logged as metrics by each tracker, with the real libraries
offline: MLflow's file store read back with its client, TensorBoard event files with its
EventAccumulator, W&B offline runs from their files. The events are a real stored study's
(``tracker_events``), its trials given the latency an inference trial stores in its
telemetry (figures made up, named as such)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from advisor.core.latency import KEY, Latency
from advisor.core.metric import DEFAULT_METRIC
from advisor.outputs.tracker_logs import trial_log

from recorded_study import NAME
from tracker_events import finished, recorded, tune_only
from wandb_records import wandb_offline  # noqa: F401  (fixture)

# trial 1's latency (made up): 200 calls at its batch of 64; batch 1 measured
MEASURED = Latency(64, 200, 0.52, 0.60, 0.66, 0.096, 0.134, 50)
# trial 2's: batch 1 not measured (as with several ranks)
NO_BATCH1 = Latency(256, 200, 1.9, 2.2, 2.5, batch1_note="several ranks")
EXPECTED = {"latency/p50_ms": 0.52, "latency/p95_ms": 0.60, "latency/p99_ms": 0.66, "latency/batch_size": 64.0,
            "latency/calls": 200.0, "latency/batch1_ms": 0.096, "latency/batch1_p99_ms": 0.134}


def with_latency(study):
    """The study's Finished events, trials 1 and 2 carrying a latency as an inference trial stores it."""
    events = []
    for event in finished(study):
        latency = {1: MEASURED, 2: NO_BATCH1}.get(event.number)
        if latency is not None:
            attrs = event.record.attrs | {"telemetry": {**event.record.attrs.get("telemetry", {}),
                                                        KEY: latency.to_dict()}}
            event = replace(event, record=replace(event.record, attrs=attrs))
        events.append(event)
    return events


def logged(tmp_path, log_to):
    url, study = recorded(tmp_path)
    tune_only(url, study, log_to, with_latency(study))
    return study


def test_the_latency_is_built_once_as_metrics(tmp_path):
    _, study = recorded(tmp_path)
    events = with_latency(study)
    metrics = {e.number: trial_log(e, NAME, DEFAULT_METRIC).metrics for e in events}
    assert {k: v for k, v in metrics[1].items() if k.startswith("latency/")} == pytest.approx(EXPECTED)
    two = {k for k in metrics[2] if k.startswith("latency/")}
    assert "latency/p99_ms" in two and "latency/batch1_ms" not in two  # not measured: not logged as a number
    assert not any(k.startswith("latency/") for k in metrics[0])  # a trial without latency (a training trial's)


def test_mlflow_logs_the_latency(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    for variable in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = f"file://{tmp_path / 'mlruns'}"
    logged(tmp_path, (f"mlflow:{store}",))
    client = mlflow.MlflowClient(tracking_uri=store)
    runs = client.search_runs([client.get_experiment_by_name(NAME).experiment_id])
    trials = {int(r.data.tags["advisor.trial"]): r for r in runs if r.data.tags["advisor.role"] == "trial"}
    got = {k: v for k, v in trials[1].data.metrics.items() if k.startswith("latency/")}
    assert got == pytest.approx(EXPECTED)
    assert trials[2].data.metrics["latency/p99_ms"] == 2.5 and "latency/batch1_ms" not in trials[2].data.metrics
    assert not any(k.startswith("latency/") for k in trials[0].data.metrics)


def test_tensorboard_logs_the_latency(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logged(tmp_path, (f"tensorboard:{tmp_path / 'tb'}",))
    events = EventAccumulator(str(tmp_path / "tb" / NAME / "trial-0001"), size_guidance={"scalars": 0})
    events.Reload()
    got = {k: events.Scalars(k)[0].value for k in events.Tags()["scalars"] if k.startswith("latency/")}
    assert got == pytest.approx(EXPECTED)


def test_wandb_logs_the_latency(tmp_path, wandb_offline):  # noqa: F811  (the fixture)
    pytest.importorskip("wandb")
    from wandb_records import offline_runs

    logged(tmp_path, ("wandb",))
    runs = offline_runs(tmp_path / "wb" / "wandb")
    trials = {int(r.summary["advisor.trial"]): r for r in runs if r.job_type == "trial"}
    got = {k: v for k, v in trials[1].summary.items() if k.startswith("latency/")}
    assert got == pytest.approx(EXPECTED)
    assert trials[2].summary["latency/p99_ms"] == 2.5 and "latency/batch1_ms" not in trials[2].summary
