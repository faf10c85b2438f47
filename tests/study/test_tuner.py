"""End to end on a real local Ray with real SQLite storage: tune, failures, resume, export."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil

import optuna
import pytest
import yaml

from advisor.cli.main import main
from advisor.core.export_format import load_config

from conftest import EXAMPLES, QUICK, WORKLOADS

pytestmark = pytest.mark.ray

FAST = ["--train-samples", "300"]


def load(db, name):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}")


EAGER = ["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "eager", "--trials", "4", *FAST]


@pytest.fixture(scope="module")
def eager_study(ray_session, tmp_path_factory):
    """One real 4-trial study (``EAGER``), run once: its advisor.db and what it printed. The
    tests that only read a finished study, or resume one, copy the database (``in_workdir``)."""
    where = tmp_path_factory.mktemp("eager-study")
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:  # what the function-scoped autouse fixtures set
        mp.chdir(where)
        mp.delenv("ADVISOR_STORAGE", raising=False)
        for variable, value in QUICK.items():
            mp.setenv(variable, value)
        mp.setenv("ADVISOR_HOME", str(tmp_path_factory.mktemp("advisor-home")))
        with contextlib.redirect_stdout(out):
            code = main(EAGER)
    assert code == 0
    return where / "advisor.db", out.getvalue()


def in_workdir(eager_study, workdir):
    """A copy of the shared study's database as ./advisor.db of this test."""
    shutil.copy(eager_study[0], workdir / "advisor.db")
    return workdir / "advisor.db"


def test_tune_records_a_real_study(eager_study):
    db, out = eager_study
    study = load(db, "digits_mlp-eager")
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
    # the memory plan is made where the memory is at stake (advisor.core.memory_stake): for the
    # baseline, before any peak is known; not for the digits MLP's candidates (tens of MiB at
    # most, against this machine's gigabytes)
    assert base.user_attrs["memory_estimate"]["peak_bytes"] > 0
    assert all("memory_estimate" not in t.user_attrs for t in measured[1:])
    attrs = study.user_attrs
    assert attrs["workload_sha256"] and attrs["hardware"]["cpu_cores"] >= 1
    assert attrs["space"]["batch_size"]["choices"]
    assert "Pareto front" in out and "(baseline)" in out
    assert "advisor export" in out and "trials: 4 run" in out
    assert re.search(r"^picks:  fastest trial \d+.*, smallest trial \d+.*, best-metric trial \d+.*, balanced trial \d+",
                     out, re.M), out  # what `advisor export --pick` writes, named before the study ends


def test_resume_completes_total_and_fails_stale_running(eager_study, workdir, capsys):
    args = ["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "eager", *FAST]
    study = load(in_workdir(eager_study, workdir), "digits_mlp-eager")  # 4 trials done
    stale = study.ask()  # what a killed driver leaves behind: a RUNNING trial
    assert main([*args, "--trials", "6"]) == 0
    out = capsys.readouterr().out
    study = load(workdir / "advisor.db", "digits_mlp-eager")
    trials = study.get_trials()
    assert trials[stale.number].state.name == "FAIL"
    assert trials[stale.number].user_attrs["failure_class"] == "interrupted"
    assert "left running by an earlier run" in out
    assert "older version's stopping rule" not in out  # a study of today's version: nothing to say
    assert sum(1 for t in trials if t.user_attrs.get("baseline")) == 1  # baseline not re-run
    real = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED") and "duplicate_of" not in t.user_attrs]
    assert len(real) == 6  # --trials is the study's total (the interrupted one does not count); probed ones do
    assert not [t for t in trials if t.state.name == "RUNNING"]


def test_resume_with_other_settings_is_refused(eager_study, workdir, capsys):
    in_workdir(eager_study, workdir)  # stored with --train-samples 300
    assert main([*EAGER[:-2], "--train-samples", "400"]) == 2
    said = capsys.readouterr()
    assert "another setup: settings: train_samples 300 then, 400 now" in said.err
    assert "its trials would not be comparable" in said.err
    assert "space     eager" in said.out and "study     " not in said.out  # no line says a refused study runs
    # an option is named by its flag, not the study attribute it is stored as (a review read
    # "max_accuracy_drop: 0.05 then, 0.02 now" and "max_drop_relative: false then, true now")
    assert main([*EAGER[:-2], "--train-samples", "300", "--max-metric-drop", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "another setup: --max-metric-drop: 0.01 then, 0.5 now; its trials' verdicts and front were reached " \
           "with the values it stored" in err and "max_accuracy_drop" not in err
    assert main([*EAGER[:-2], "--train-samples", "300", "--max-metric-drop", "1%"]) == 2
    err = capsys.readouterr().err
    assert "--max-metric-drop as a percentage: no then, yes now" in err and "max_drop_relative" not in err


def test_export_round_trip(eager_study, workdir, capsys):
    in_workdir(eager_study, workdir)
    assert main(["export", "--pick", "balanced", "-o", "best.yaml"]) == 0
    assert "wrote trial" in capsys.readouterr().out
    document = yaml.safe_load((workdir / "best.yaml").read_text())
    config = load_config(workdir / "best.yaml")
    assert config.to_dict() == document["config"]
    study = load(workdir / "advisor.db", "digits_mlp-eager")
    trial = study.trials[document["source"]["trial"]]
    assert trial.user_attrs["config"] == document["config"]
    measured = document["measured"]
    # the trial's own run; a baseline whose first run was disturbed (a loaded machine) exports its
    # re-measured reference as its throughput, and its own run beside it (as every view shows it)
    assert measured.get("throughput_first_run", measured["throughput"]) == pytest.approx(trial.values[0])
    if "throughput_first_run" in measured:
        assert trial.user_attrs.get("baseline") and measured["throughput_note"].startswith("The baseline's first run")
    for pick in ("fastest", "smallest", "best-metric"):
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


def test_the_exported_script_scores_what_its_trial_scored(eager_study, workdir, capsys):
    """`advisor export --format python` rebuilds the trial: the same seed for the initial
    weights and the shuffle, the same training samples and evaluation batch, so its
    validation metric is the trial's (to a sample: the trial ran under Ray, with its own
    thread count)."""
    import subprocess
    import sys

    in_workdir(eager_study, workdir)
    study = load(workdir / "advisor.db", "digits_mlp-eager")
    trained = [t for t in study.trials if t.state.name == "COMPLETE" and t.user_attrs.get("accuracy") is not None
               and "duplicate_of" not in t.user_attrs]
    for trial in (trained[0], trained[-1]):
        assert main(["export", "--trial", str(trial.number), "--format", "python", "-o", f"t{trial.number}.py"]) == 0
        run = subprocess.run([sys.executable, f"t{trial.number}.py"], capture_output=True, text=True, timeout=300,
                             cwd=workdir)
        assert run.returncode == 0, run.stderr[-3000:]
        score = float(run.stdout.split("validation metric ")[1].split()[0])
        samples = int(run.stdout.split("(")[1].split()[0])
        assert score == pytest.approx(trial.user_attrs["accuracy"], abs=1.01 / samples), (trial.number, run.stdout)


def test_a_space_run_through_says_so_and_offers_no_resume(ray_session, workdir, capsys):
    """--trials 6 on a space of two configurations: the study stops when both are measured,
    and its summary says resuming would run nothing more, not "resume: run the 4 left"."""
    (workdir / "two.yaml").write_text("batch_size: {choices: [64, 32]}\n")
    code = main(["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "two.yaml", "--trials", "6", "--no-confirm",
                 *FAST])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "every configuration of the space (2) has been measured or ruled out" in out
    assert "(every configuration of the space was measured or ruled out: a larger --space gives the search " \
           "more to try)" in " ".join(out.split())
    assert "resume: run the" not in out
