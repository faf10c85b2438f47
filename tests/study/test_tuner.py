"""End to end on a real local Ray with real SQLite storage: tune, failures, resume, export."""

from __future__ import annotations

import json

import optuna
import pytest
import yaml

from advisor.cli.main import main
from advisor.core.export_format import load_config

from conftest import EXAMPLES, WORKLOADS

pytestmark = pytest.mark.ray

FAST = ["--train-samples", "300"]


def load(db, name):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}")


def test_tune_records_a_real_study(ray_session, workdir, capsys):
    code = main(["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "eager", "--trials", "4", *FAST])
    out = capsys.readouterr().out
    assert code == 0
    study = load(workdir / "advisor.db", "digits_mlp-eager")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE", "MAXIMIZE"]
    trials = study.get_trials()
    base = trials[0]
    assert base.user_attrs["baseline"] is True
    assert base.user_attrs["config"]["batch_size"] == 32 and base.user_attrs["config"]["precision"] == "fp32"
    measured = [t for t in trials if "duplicate_of" not in t.user_attrs]
    assert len(measured) == 4
    for t in measured:
        if t.state.name == "COMPLETE":
            for key in ("throughput", "peak_memory_bytes", "accuracy", "step_time_iqr_s", "wall_s"):
                assert key in t.user_attrs
            assert t.values[0] == pytest.approx(t.user_attrs["throughput"])
            assert "accuracy_drop" in t.constraints
        elif t.state.name == "PRUNED":  # two-stage: probed, and no accuracy run was needed
            assert t.user_attrs["probe_done"] and t.user_attrs["accuracy_skipped"]
            for key in ("throughput", "peak_memory_bytes", "step_time_iqr_s", "wall_s"):
                assert key in t.user_attrs
            assert "accuracy" not in t.user_attrs and t.values is None
        else:
            assert t.user_attrs["failure_class"] and t.user_attrs["failure_message"]
    attrs = study.user_attrs
    assert attrs["workload_sha256"] and attrs["hardware"]["cpu_cores"] >= 1
    assert attrs["space"]["batch_size"]["choices"]
    assert "Pareto front" in out and "(baseline)" in out
    assert "advisor export" in out and "trials: 4 run" in out


def test_resume_completes_total_and_fails_stale_running(ray_session, workdir, capsys):
    args = ["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "eager", *FAST]
    assert main([*args, "--trials", "2"]) == 0
    study = load(workdir / "advisor.db", "digits_mlp-eager")
    stale = study.ask()  # what a killed driver leaves behind: a RUNNING trial
    assert main([*args, "--trials", "4"]) == 0
    out = capsys.readouterr().out
    study = load(workdir / "advisor.db", "digits_mlp-eager")
    trials = study.get_trials()
    assert trials[stale.number].state.name == "FAIL"
    assert trials[stale.number].user_attrs["failure_class"] == "interrupted"
    assert "left running by an earlier run" in out
    assert sum(1 for t in trials if t.user_attrs.get("baseline")) == 1  # baseline not re-run
    real = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED") and "duplicate_of" not in t.user_attrs]
    assert len(real) == 4  # --trials is the study's total (the interrupted one does not count); probed ones do
    assert not [t for t in trials if t.state.name == "RUNNING"]


def test_resume_with_other_settings_is_refused(ray_session, workdir, capsys):
    args = ["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "eager", "--trials", "1"]
    assert main([*args, *FAST]) == 0
    capsys.readouterr()
    assert main([*args, "--train-samples", "400"]) == 2
    assert "different settings" in capsys.readouterr().err


def test_export_round_trip(ray_session, workdir, capsys):
    assert main(["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "eager", "--trials", "3", *FAST]) == 0
    capsys.readouterr()
    assert main(["export", "--pick", "balanced", "-o", "best.yaml"]) == 0
    assert "wrote trial" in capsys.readouterr().out
    document = yaml.safe_load((workdir / "best.yaml").read_text())
    config = load_config(workdir / "best.yaml")
    assert config.to_dict() == document["config"]
    study = load(workdir / "advisor.db", "digits_mlp-eager")
    trial = study.trials[document["source"]["trial"]]
    assert trial.user_attrs["config"] == document["config"]
    assert document["measured"]["throughput"] == pytest.approx(trial.values[0])
    for pick in ("fastest", "smallest", "most-accurate"):
        assert main(["export", "--pick", pick, "--format", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["config"]["batch_size"] >= 1
    assert main(["export", "--trial", "99"]) == 2
    assert "has no trial 99" in capsys.readouterr().err


def test_export_refuses_failed_trial(ray_session, workdir, capsys):
    space = workdir / "s.yaml"
    space.write_text("batch_size: {choices: [64, 32]}\n")
    assert main(["tune", str(WORKLOADS / "faulty.py"), "--space", str(space), "--trials", "2", *FAST]) == 0
    capsys.readouterr()
    assert main(["export", "--trial", "1"]) == 2
    assert "did not complete (error)" in capsys.readouterr().err


def test_gpu_request_on_cpu_cluster_is_refused_up_front(ray_session):
    from advisor.core.errors import SchedulerError
    from advisor.runner.ray_executor import RayExecutor

    with pytest.raises(SchedulerError, match="no node of the Ray cluster has one"):
        RayExecutor("cuda").start()
