"""``advisor confirm --log-to``: the confirmation pairs of a study confirmed after it ran
go to the runs ``advisor tune`` logged, with the real libraries offline (a local MLflow
file store read back with MLflow's client, TensorBoard event files read with its
EventAccumulator, W&B offline runs read from their files). The study's events are
replayed from a real stored study (``tracker_events``): tune's trials first, then the
pairs as ``advisor confirm`` emits them (``Paired`` only; no trial is logged again)."""

from __future__ import annotations

import statistics

import pytest

from advisor.cli.main import parser
from advisor.core.events import Event, Note, Paired
from advisor.core.stored import CONFIRMATION, read_study
from advisor.outputs.trackers import open_confirm_trackers
from advisor.study.run.tuner import StudyOutcome

from conftest import exit_status
from recorded_study import NAME
from tracker_events import CONFIRMED, RATIOS, confirmation, finished, recorded, tune_only
from wandb_records import wandb_offline  # noqa: F401  (fixture)


def tuned(tmp_path, log_to):
    """The recorded study as ``advisor tune --log-to`` logged it (no confirmation)."""
    url, study = recorded(tmp_path)
    tune_only(url, study, log_to)
    return url, study


def confirm(study, log_to) -> list[Event]:
    """``advisor confirm --log-to``'s listener, handed what a confirmation emits: a note,
    then each pair as it lands (stored first, as ``Confirmer`` does); then closed."""
    notes: list[Event] = []
    trackers = open_confirm_trackers(read_study(study), log_to)
    trackers.notify = notes.append
    trackers.event(Note("confirming 1 configuration"))
    assert not trackers.started  # nothing logged before the first pair lands
    for event in finished(study)[:2]:
        trackers.event(event)  # never a trial: confirm emits none, and would not log one
    config = read_study(study).records[CONFIRMED].config
    for pairs in range(1, len(RATIOS) + 1):
        c = confirmation(pairs)
        study.set_user_attr(f"{CONFIRMATION}{CONFIRMED}", c.to_dict())
        trackers.event(Paired(CONFIRMED, config, c, 3.0))  # type: ignore[arg-type]
    trackers.close(StudyOutcome(study, None))
    return notes


def test_mlflow_pairs_land_on_the_trial_run_tune_logged(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    for variable in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = f"file://{tmp_path / 'mlruns'}"
    _, study = tuned(tmp_path, (f"mlflow:{store}",))
    notes = confirm(study, (f"mlflow:{store}",))
    assert any("logging the confirmation pairs as they land to MLflow experiment" in n.text for n in notes)

    client = mlflow.MlflowClient(tracking_uri=store)
    runs = client.search_runs([client.get_experiment_by_name(NAME).experiment_id])
    studies = [r for r in runs if r.data.tags["advisor.role"] == "study"]
    trials = {int(r.data.tags["advisor.trial"]): r for r in runs if r.data.tags["advisor.role"] == "trial"}
    assert len(studies) == 1 and sorted(trials) == list(range(11))  # the same runs: none added, none twice
    history = client.get_metric_history(trials[CONFIRMED].info.run_id, "confirmed/throughput_ratio")
    assert [m.step for m in history] == [1, 2, 3]
    assert history[-1].value == pytest.approx(statistics.median(RATIOS), rel=0.01)
    assert trials[CONFIRMED].data.tags["confirmation"] == "confirmed"
    [parent] = studies
    assert parent.info.status == "FINISHED" and parent.data.tags["confirmed_by"] == "advisor confirm"
    assert parent.data.tags["workload_path"]  # tune's settings stay as tune logged them
    assert not any(k.startswith("trial_") for k in parent.data.metrics)  # not on the study run: on the trial's


def test_tensorboard_pairs_land_in_the_trial_folder_tune_wrote(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    where = f"tensorboard:{tmp_path / 'tb'}"
    _, study = tuned(tmp_path, (where,))
    folder = tmp_path / "tb" / NAME / f"trial-{CONFIRMED:04d}"
    before = sorted(p.name for p in folder.iterdir())
    confirm(study, (where,))
    assert sorted(p.name for p in (tmp_path / "tb" / NAME).iterdir()) == ["study"] + [
        f"trial-{n:04d}" for n in range(11)]
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    assert [s.step for s in events.Scalars("confirmed/throughput_ratio")] == [1, 2, 3]
    assert events.Scalars("throughput")[0].value == pytest.approx(11873.0)  # tune's figures, the same folder
    assert len(list(folder.iterdir())) == len(before) + 1  # one more event file: the pairs'


def test_wandb_pairs_go_to_a_confirmation_run_in_the_study_group(tmp_path, wandb_offline):  # noqa: F811  (the fixture)
    pytest.importorskip("wandb")
    from wandb_records import offline_runs

    _, study = tuned(tmp_path, ("wandb",))
    confirm(study, ("wandb",))
    runs = offline_runs(tmp_path / "wb" / "wandb")
    assert sorted(r.job_type for r in runs) == ["confirmation", "study"] + ["trial"] * 11
    [run] = [r for r in runs if r.job_type == "confirmation"]
    assert run.group == NAME and run.name == f"{NAME}: confirmation" and run.exit_code == 0
    pairs = [h[f"confirmation/trial_{CONFIRMED}/pairs"] for h in run.history
             if f"confirmation/trial_{CONFIRMED}/pairs" in h]
    assert pairs == [1, 2, 3]


def test_confirm_declares_log_to_as_tune_does(monkeypatch):
    monkeypatch.delenv("ADVISOR_LOG_TO", raising=False)
    from advisor.cli._options import log_to

    commands = {a.dest: a for a in parser()._subparsers._group_actions[0].choices["confirm"]._actions}
    tune = {a.dest: a for a in parser()._subparsers._group_actions[0].choices["tune"]._actions}
    assert commands["log_to"].help == tune["log_to"].help and commands["log_to"].option_strings == ["--log-to"]
    args = parser().parse_args(["confirm", "--log-to", "mlflow, TensorBoard:./tb", "--log-to", "wandb:team/p"])
    assert log_to(args) == ("mlflow", "tensorboard:./tb", "wandb:team/p")
    monkeypatch.setenv("ADVISOR_LOG_TO", "tensorboard")
    assert log_to(parser().parse_args(["confirm"])) == ("tensorboard",)


@pytest.mark.parametrize("given,message", [
    ("neptune", "--log-to neptune: unknown tracker 'neptune'"),
    ("mlflow,mlflow", "--log-to mlflow is given twice"),
])
def test_a_bad_tracker_exits_2_before_anything_runs(tmp_path, capsys, monkeypatch, given, message):
    monkeypatch.delenv("ADVISOR_LOG_TO", raising=False)
    url, _ = recorded(tmp_path)
    assert exit_status(["confirm", "--storage", url, "--log-to", given]) == 2
    assert message in capsys.readouterr().err


def test_a_tracker_that_cannot_log_exits_2_before_ray_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ADVISOR_LOG_TO", raising=False)
    pytest.importorskip("tensorboard")
    url, _ = recorded(tmp_path)
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert exit_status(["confirm", "--storage", url, "--log-to", f"tensorboard:{blocked}"]) == 2
    err = capsys.readouterr().err
    assert f"--log-to tensorboard:{blocked}" in err and "cannot be written" in err


def test_the_projects_table_names_confirms_trackers_too(workdir, monkeypatch):
    from advisor.cli import project_defaults
    from advisor.cli._options import log_to

    monkeypatch.delenv("ADVISOR_LOG_TO", raising=False)
    (workdir / "pyproject.toml").write_text('[tool.advisor]\nlog-to = ["mlflow", "tensorboard:tb"]\n')
    p = parser()
    args = p.parse_args(["confirm"])
    project_defaults.apply_project_defaults(p, args, ["confirm"], start=workdir)
    assert log_to(args) == ("mlflow", "tensorboard:tb")


def test_a_tracker_whose_library_is_missing_is_refused(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.delenv("ADVISOR_LOG_TO", raising=False)
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # not importable, installed or not
    url, _ = recorded(tmp_path)
    assert exit_status(["confirm", "--storage", url, "--log-to", "mlflow"]) == 2
    assert "--log-to mlflow needs the mlflow package: pip install 'advisor[mlflow]'" in capsys.readouterr().err
