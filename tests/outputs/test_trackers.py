"""--log-to itself, whichever trackers are installed: the option (comma-separated or
repeated, $ADVISOR_LOG_TO, [tool.advisor], advisor.tune(log_to=...)), a tracker whose
library is missing (refused before anything runs; the libraries need not be installed
here: their absence is made real by blocking their import), what a trial is logged as,
and a tracker that fails mid-study (dropped with one note; the others and the study go on)."""

from __future__ import annotations

import sys

import pytest

import advisor
from advisor.cli._options import tune_options
from advisor.cli.main import parser
from advisor.core.config import TrialConfig
from advisor.core.errors import StudyError
from advisor.core.events import Finished, Started
from advisor.core.metric import MetricSpec
from advisor.core.objectives import Versus
from advisor.core.results import TrialResult
from advisor.core.stored import TrialRecord
from advisor.outputs.tracker_logs import metric_key, trial_log
from advisor.outputs.trackers import Trackers
from advisor.study.options.tune_options import TRACKERS, TuneOptions
from advisor.study.run.tuner import StudyOutcome

from conftest import EXAMPLES, exit_status
from tracker_events import finished, plan, recorded, replay

MODEL = str(EXAMPLES / "digits_mlp.py")


def cli(*argv):
    return tune_options(parser().parse_args(["tune", MODEL, *argv]))


def test_trackers_are_given_comma_separated_or_repeated(monkeypatch):
    monkeypatch.delenv("ADVISOR_LOG_TO", raising=False)
    assert cli().log_to == ()
    assert cli("--log-to", "mlflow, TensorBoard:./tb", "--log-to", "wandb:team/tuning").log_to == (
        "mlflow", "tensorboard:./tb", "wandb:team/tuning")
    assert cli("--log-to", "mlflow:http://mlflow.internal:5000").log_to == ("mlflow:http://mlflow.internal:5000",)
    monkeypatch.setenv("ADVISOR_LOG_TO", "tensorboard,wandb")
    assert cli().log_to == ("tensorboard", "wandb") and cli("--log-to", "mlflow").log_to == ("mlflow",)
    for given in ("mlflow,wandb", ["mlflow", "wandb"], ("mlflow", "wandb")):
        assert TuneOptions.given(MODEL, {"log_to": given}, python=True).log_to == ("mlflow", "wandb")


@pytest.mark.parametrize("given,python,message", [
    ("neptune", False, "--log-to neptune: unknown tracker 'neptune' (expected mlflow, tensorboard, wandb, each "
                       "optionally followed by :WHERE)"),
    ("mlflow,tensorboard,mlflow", False, "--log-to mlflow is given twice"),
    ("tensorboard:", False, "--log-to tensorboard:: nothing after ':'"),
    ("neptune", True, "log_to='neptune': unknown tracker 'neptune'"),
    (["mlflow", 3], True, "log_to=['mlflow', 3]: expected tracker names (mlflow, tensorboard, wandb)"),
])
def test_a_bad_tracker_is_named_as_the_caller_wrote_it(given, python, message):
    with pytest.raises(StudyError) as info:
        if python:
            TuneOptions.given(MODEL, {"log_to": given}, python=True)
        else:
            cli("--log-to", given)
    assert str(info.value).startswith(message)


def test_a_bad_tracker_in_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("ADVISOR_LOG_TO", "mlflw")
    with pytest.raises(StudyError, match=r"^\$ADVISOR_LOG_TO mlflw: unknown tracker 'mlflw'"):
        cli()


def test_the_projects_table_names_trackers(workdir, monkeypatch):
    from advisor.cli import project_defaults

    monkeypatch.delenv("ADVISOR_LOG_TO", raising=False)
    (workdir / "pyproject.toml").write_text('[tool.advisor]\nlog-to = ["mlflow", "tensorboard:tb"]\n')
    p = parser()
    args = p.parse_args(["tune", MODEL])
    project_defaults.apply_project_defaults(p, args, ["tune", MODEL], start=workdir)
    assert tune_options(args).log_to == ("mlflow", "tensorboard:tb")


@pytest.fixture(params=sorted(TRACKERS))
def missing(request, monkeypatch):
    """A tracker whose library is not importable (blocked if it is installed here)."""
    package = TRACKERS[request.param]
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)
    return request.param


def test_a_tracker_whose_library_is_missing_is_refused_before_anything_runs(missing, workdir, capsys):
    code = exit_status(["tune", MODEL, "--trials", "1", "--log-to", f"{missing}:somewhere"])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert f"--log-to {missing} needs the {TRACKERS[missing]} package: pip install 'advisor[{missing}]'" in err
    assert out == "" and list(workdir.iterdir()) == []  # nothing planned, nothing written


def test_from_python_the_missing_library_names_the_keyword(missing, workdir):
    with pytest.raises(StudyError, match=rf"^log_to='{missing}' needs the {TRACKERS[missing]} package: "
                                         rf"pip install 'advisor\[{missing}\]'"):
        advisor.tune(MODEL, trials=1, log_to=[missing])
    assert list(workdir.iterdir()) == []


def _finished(result: TrialResult, versus: Versus | None, state: str = "complete") -> Finished:
    config = TrialConfig(batch_size=128, precision="bf16")
    record = TrialRecord(7, state, config, finished_at=1_000_000.0)
    return Finished(7, config, result, 12.5, record, versus)


def test_a_trial_is_logged_with_every_knob_its_figures_and_the_metric_in_its_own_direction():
    mse = MetricSpec(name="mse", higher_is_better=False, fraction=False)
    result = TrialResult(ok=True, throughput=900.0, peak_memory_bytes=2**20, score=-0.25, train_samples=512,
                         final_loss=float("nan"), phase_s={"train": 2.0})
    log = trial_log(_finished(result, Versus(1.5, 0.8, -0.05)), "s", mse)
    assert log.params == TrialConfig(batch_size=128, precision="bf16").to_dict()  # all knobs, not only the changed
    assert log.metrics["mse"] == 0.25 and log.metrics["mse_delta"] == pytest.approx(0.05)  # worse: higher mse
    assert log.metrics["throughput_ratio"] == 1.5 and log.metrics["phase/train_s"] == 2.0
    assert "final_loss" not in log.metrics  # not finite: no tracker takes it
    assert log.name == "trial 7: bs=128 bf16" and (log.started, log.ended) == (1_000_000.0 - 12.5, 1_000_000.0)
    assert log.tags["advisor.trial"] == "7" and log.tags["state"] == "complete"
    assert metric_key(MetricSpec(name="throughput")) == "metric_throughput"  # never another figure's key
    failed = trial_log(_finished(TrialResult.failed("oom", "out of memory\n" + "x" * 5000), None, "failed"), "s", mse)
    assert not failed.ok and failed.metrics == {"wall_s": 12.5, "compile_s": 0.0, "train_samples": 0.0,
                                                 "timed_steps": 0.0, "compute_s": 0.0}
    assert failed.tags["failure_class"] == "oom" and len(failed.tags["failure_message"]) == 2000


class Recording:
    """A tracker that keeps what it is handed; ``broken`` names the step where it raises."""

    def __init__(self, name: str, broken: str = "") -> None:
        self.name, self.where, self.broken, self.calls = name, f"{name} here", broken, []

    def _call(self, step, value):
        if step == self.broken:
            raise OSError(28, "No space left on device")
        self.calls.append((step, value))

    def start(self, study):
        self._call("start", study)

    def trial(self, trial):
        self._call("trial", trial.number)

    def study(self, metrics, tags):
        self._call("study", metrics)

    def confirmed(self, c):
        self._call("confirmed", c.number)

    def finish(self, end):
        self._call("finish", end.status)


def test_a_failing_tracker_is_dropped_with_one_note_and_the_others_go_on(tmp_path):
    url, study = recorded(tmp_path)
    good, broken = Recording("good"), Recording("broken", broken="trial")
    notes = replay(study, Trackers(plan(url, ()), [good, broken]), stop_reason="interrupted by SIGTERM")
    assert [n.text for n in notes] == [
        "logging each trial as it is stored to good here; broken here",
        "--log-to broken: logging trial 0 failed (OSError: [Errno 28] No space left on device); nothing more "
        "is logged to broken, the study goes on"]
    assert broken.calls == [("start", broken.calls[0][1])]
    steps = [step for step, _ in good.calls]
    assert steps == ["start", "trial", "study", *["trial"] * 10, *["confirmed"] * 3, "finish"]  # study: the baseline
    assert good.calls[-1] == ("finish", "interrupted")


def test_without_a_start_nothing_is_logged_and_a_failed_study_closes_its_runs(tmp_path):
    url, study = recorded(tmp_path)
    before = Recording("before")
    trackers = Trackers(plan(url, ()), [before])
    for event in finished(study):  # a study that never started (its setup refused) logs nothing
        trackers.event(event)
    trackers.close(None)
    assert before.calls == []
    failed = Recording("failed")
    trackers = Trackers(plan(url, ()), [failed])
    trackers.event(Started(1.0, 1, {}))
    trackers.close(None)  # the study raised
    assert [step for step, _ in failed.calls] == ["start", "finish"] and failed.calls[-1][1] == "failed"
    trackers.close(StudyOutcome(study, None))  # closed once
    assert len(failed.calls) == 2
