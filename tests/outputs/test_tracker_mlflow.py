"""--log-to mlflow against a real local MLflow store, read back with MLflow's own client: a
file store (which MLflow keeps in maintenance mode behind $MLFLOW_ALLOW_FILE_STORE) and its
default, SQLite. The study's events are replayed from a real stored study
(``tracker_events``): the study run, a run per trial nested under it with its knobs,
figures and failure, the confirmation on the trial's run, the front; a resumed study goes
on in its run and adds no trial twice; a store lost mid-study costs one note, never the
study."""

from __future__ import annotations

import shutil
import statistics

import pytest

from advisor.core.config import TrialConfig
from advisor.core.errors import StudyError
from advisor.core.events import Started
from advisor.outputs.trackers import open_trackers
from advisor.study.run.tuner import StudyOutcome

from conftest import skip_without
from recorded_study import NAME, MiB
from tracker_events import CONFIRMED, RATIOS, finished, plan, recorded, replay, run

skip_without("mlflow")


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A file store in a temp dir; MLflow's own environment cleared."""
    for variable in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return f"file://{tmp_path / 'mlruns'}"


def runs_of(uri, experiment=NAME):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    found = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    studies = [r for r in found if r.data.tags["advisor.role"] == "study"]
    trials = {int(r.data.tags["advisor.trial"]): r for r in found if r.data.tags["advisor.role"] == "trial"}
    assert len(trials) == len(found) - len(studies)
    return client, studies, trials


def test_each_trial_is_a_run_nested_under_the_study_run(tmp_path, store):
    study, notes = run(tmp_path, (f"mlflow:{store}",))
    client, [parent], trials = runs_of(store)
    assert sorted(trials) == list(range(11))
    assert all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in trials.values())

    base = trials[0]
    assert base.info.run_name == "trial 0 (baseline): bs=64 fp32" and base.info.status == "FINISHED"
    assert base.data.params == {k: str(v) for k, v in TrialConfig().to_dict().items()}  # every knob
    assert base.data.metrics["throughput"] == 6736.0 and base.data.metrics["accuracy"] == 0.9667
    assert base.data.metrics["peak_memory_bytes"] == int(98.6 * MiB) and base.data.metrics["wall_s"] == 5.0
    assert base.data.metrics["phase/train_s"] == 3.1 and base.data.metrics["step_time_median_s"] > 0
    assert base.data.tags["baseline"] == "true" and base.data.tags["state"] == "complete"

    bf16 = trials[1]
    assert bf16.data.params["precision"] == "bf16" and bf16.data.tags["config"] == "bs=64 bf16"
    assert bf16.data.metrics["throughput_ratio"] == pytest.approx(10240 / 6736)
    assert bf16.data.metrics["accuracy_delta"] == pytest.approx(0.9639 - 0.9667)
    assert bf16.data.tags["feasible"] == "true" and bf16.data.tags["advisor.study"] == NAME

    dropped = trials[5]  # accuracy 0.8222: infeasible
    assert dropped.data.tags["feasible"] == "false"
    assert "worse than --max-metric-drop" in dropped.data.tags["infeasible"]

    oom = trials[8]
    assert oom.info.status == "FAILED" and oom.data.tags["failure_class"] == "oom"
    assert oom.data.tags["failure_message"] == "CUDA out of memory. Tried to allocate 2.00 GiB"
    assert "throughput" not in oom.data.metrics and oom.data.params["batch_size"] == "1024"

    # the confirmation, on the trial's run, a step per pair as it landed
    confirmed = trials[CONFIRMED]
    history = client.get_metric_history(confirmed.info.run_id, "confirmed/throughput_ratio")
    assert [m.step for m in history] == [1, 2, 3]
    assert history[-1].value == pytest.approx(statistics.median(RATIOS), rel=0.01)
    assert confirmed.data.metrics["confirmed/throughput_low"] < confirmed.data.metrics["confirmed/throughput_ratio"]
    assert confirmed.data.metrics["confirmed/memory_ratio"] == pytest.approx(131.0 / 98.6)
    assert confirmed.data.tags["confirmation"] == "confirmed"

    # the study's run: its settings and hardware, the baseline, the front and counts at the end
    tags, metrics = parent.data.tags, parent.data.metrics
    assert parent.info.run_name == NAME and parent.info.status == "FINISHED"
    assert tags["study"] == NAME and tags["space"] == "default" and tags["hardware.cpu_model"]
    assert tags["storage"].startswith("sqlite:///") and tags["baseline_config"] == "bs=32 fp32"  # digits_mlp's
    assert metrics["baseline/throughput"] == 6736.0 and metrics["trials/run"] == 11 and metrics["trials/failed"] == 2
    front = {int(n) for n in tags["front"].split(", ")}
    assert CONFIRMED in front and 5 not in front and metrics["front_size"] == len(front)
    assert {n for n, r in trials.items() if r.data.tags.get("on_front") == "true"} == front
    [note] = notes
    assert note.text == f"logging each trial as it is stored to MLflow experiment '{NAME}' at {store}"


def test_a_resumed_study_goes_on_in_its_run_and_logs_no_trial_twice(tmp_path, store):
    url, study = recorded(tmp_path)
    replay(study, open_trackers(plan(url, (f"mlflow:{store}",))))
    replay(study, open_trackers(plan(url, (f"mlflow:{store}",))), stop_reason="interrupted by the user (Ctrl-C)")
    _, [parent], trials = runs_of(store)
    assert sorted(trials) == list(range(11))  # the same trials handed again: none logged twice
    assert parent.info.status == "KILLED" and parent.data.tags["stopped"].startswith("interrupted")


def test_mlflow_is_configured_by_its_own_environment(tmp_path, monkeypatch):
    """$MLFLOW_TRACKING_URI (here MLflow's default kind of store, SQLite) and
    $MLFLOW_EXPERIMENT_NAME, with no place given after --log-to mlflow."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "team-runs")
    _, notes = run(tmp_path, ("mlflow",))
    _, [parent], trials = runs_of(uri, "team-runs")
    assert len(trials) == 11 and parent.data.tags["advisor.study"] == NAME
    assert notes[0].text.endswith(f"MLflow experiment 'team-runs' at {uri}")


def test_a_store_lost_mid_study_is_dropped_with_one_note(tmp_path, store):
    url, study = recorded(tmp_path)
    trackers = open_trackers(plan(url, (f"mlflow:{store}",)))
    notes = []
    trackers.notify = notes.append
    trackers.event(Started(1.0, 1, {}))
    shutil.rmtree(tmp_path / "mlruns")
    (tmp_path / "mlruns").write_text("the disk holding the store is gone")
    for event in finished(study):
        trackers.event(event)  # never raises
    trackers.close(StudyOutcome(study, None))
    assert len(notes) == 2 and trackers.active == []
    assert notes[1].text.startswith("--log-to mlflow: logging trial 0 failed (")
    assert notes[1].text.endswith("nothing more is logged to mlflow, the study goes on")


def test_a_server_that_does_not_answer_is_refused_before_the_study_at_once(tmp_path):
    """At once: not after MLflow's own retries (about 4 minutes by default)."""
    url, _ = recorded(tmp_path)
    with pytest.raises(StudyError, match=r"^--log-to mlflow:http://127\.0\.0\.1:9: the MLflow server at "
                                         r"http://127\.0\.0\.1:9 does not answer \(\[Errno 111\] Connection refused\)"):
        open_trackers(plan(url, ("mlflow:http://127.0.0.1:9",)))


def test_a_server_that_answers_anything_is_reachable():
    """Any HTTP answer to /health (here a 404 from a plain HTTP server) lets MLflow's own
    client speak to it."""
    import http.server
    import threading

    from advisor.outputs.tracker_mlflow import reachable

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    try:
        reachable(f"http://127.0.0.1:{server.server_port}/")
        reachable("file:///not/probed")  # not HTTP: left to MLflow
        reachable("databricks")
    finally:
        server.server_close()
        thread.join(5)
