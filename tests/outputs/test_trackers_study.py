"""--log-to on a real study, end to end: `advisor tune` on real local Ray and SQLite, the
digits MLP, paired confirmation on, logging to every tracker installed here at once (a
real MLflow file store, real TensorBoard event files, W&B offline), each read back with
its own library; then the study resumed for one more trial: nothing logged twice; then
`advisor confirm --log-to` adds a pair, logged to the runs tune logged. Timings are never
asserted, only that what the trackers hold is what the study stored (the unconfirmed
ratios tune logged live included)."""

from __future__ import annotations

import importlib.util
import json

import optuna
import pytest

from advisor.cli.main import main
from advisor.core.pairs import Confirmation
from advisor.core.stored import CONFIRMATION, read_study

from conftest import digits_mlp_at_batch_256
from wandb_records import offline_runs

pytestmark = pytest.mark.ray

FAST = ["--train-samples", "300", "--max-metric-drop", "0.5", "--no-tui", "--study", "logged"]
INSTALLED = [name for name in ("mlflow", "tensorboard", "wandb") if importlib.util.find_spec(name) is not None]


def logged_by_mlflow(uri):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    found = client.search_runs([client.get_experiment_by_name("logged").experiment_id])
    studies = [r for r in found if r.data.tags["advisor.role"] == "study"]
    trials = [r for r in found if r.data.tags["advisor.role"] == "trial"]
    return studies, {int(r.data.tags["advisor.trial"]): r for r in trials}, len(trials)


def test_a_real_study_logs_each_trial_and_its_confirmation_once(ray_session, workdir, monkeypatch, capsys):
    if not INSTALLED:
        pytest.skip("no tracker library is installed (pip install 'advisor[mlflow,tensorboard,wandb]')")
    monkeypatch.delenv("ADVISOR_CONFIRM")  # confirmation on: its pairs are logged as they land
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(workdir / "wb"))
    uri = f"file://{workdir / 'mlruns'}"
    where = {"mlflow": f"mlflow:{uri}", "tensorboard": f"tensorboard:{workdir / 'tb'}", "wandb": "wandb"}
    log_to = ",".join(where[name] for name in INSTALLED)
    # seeds that hold two memory savers far beyond the noise: the front always has a candidate
    space = workdir / "memory.yaml"
    space.write_text("batch_size: {choices: [256, 32]}\ngrad_accumulation: {choices: [1, 4]}\n"
                     "threads: {choices: [2, 1]}\n")
    model = digits_mlp_at_batch_256(workdir)
    fast = [*FAST, "--space", str(space)]
    # one pair (a round of three probes): `advisor confirm` below adds the second, logged the same way
    code = main(["tune", str(model), *fast, "--trials", "4", "--pairs", "1",
                 "--confirm-top", "1", "--json", "--log-to", log_to])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["study"] == "logged"  # stdout holds the JSON alone: no tracker wrote to it
    assert "note      logging each trial as it is stored to " in err and "--log-to" not in err  # no tracker failed

    study = read_study(optuna.load_study(study_name="logged", storage="sqlite:///advisor.db"))
    done = {r.number: r for r in study.records if r.state in ("complete", "failed", "probed")}
    confirmations = {int(k.split(":")[1]): Confirmation.from_dict(v) for k, v in study.attrs.items()
                     if k.startswith(CONFIRMATION)}
    base = study.baseline
    assert base is not None and base.figures is not None and len(done) >= 4
    assert confirmations  # the front's candidate was confirmed: its pairs were logged as they landed

    if "mlflow" in INSTALLED:
        [parent], trials, count = logged_by_mlflow(uri)
        assert set(trials) == set(done) and count == len(done)
        assert trials[base.number].data.metrics["throughput"] == pytest.approx(base.figures.throughput)
        assert parent.data.metrics["baseline/throughput"] == pytest.approx(base.figures.throughput)
        for number, c in confirmations.items():
            assert trials[number].data.metrics["confirmed/pairs"] == len(c.pairs)
            assert trials[number].data.tags["confirmation"] == c.status
        assert parent.info.status == "FINISHED"
        for number, r in done.items():  # the ratio tune printed live is the one the stored study reads
            if r.state == "complete" and not r.baseline and number not in confirmations:
                assert trials[number].data.metrics["throughput_ratio"] == pytest.approx(
                    study.versus_baseline(r).throughput_ratio, rel=1e-9), (
                    number, trials[number].data.metrics, r, study.baseline_measurements, study.baseline)
    if "tensorboard" in INSTALLED:
        folders = sorted(p.name for p in (workdir / "tb" / "logged").iterdir())
        assert folders == ["study"] + [f"trial-{n:04d}" for n in sorted(done)]
    if "wandb" in INSTALLED:
        runs = offline_runs(workdir / "wb" / "wandb")
        assert sorted(int(r.summary["advisor.trial"]) for r in runs if r.job_type == "trial") == sorted(done)
        [wandb_study] = [r for r in runs if r.job_type == "study"]
        for number, c in confirmations.items():
            assert wandb_study.summary[f"confirmation/trial_{number}/pairs"] == len(c.pairs)

    # resumed for one more trial: the earlier trials are not logged again
    code = main(["tune", str(model), *fast, "--trials", "5", "--no-confirm", "--json", "--log-to", log_to])
    assert code == 0, capsys.readouterr().err
    study = read_study(optuna.load_study(study_name="logged", storage="sqlite:///advisor.db"))
    again = {r.number for r in study.records if r.state in ("complete", "failed", "probed")}
    assert len(again) > len(done)
    if "mlflow" in INSTALLED:
        [_], trials, count = logged_by_mlflow(uri)
        assert set(trials) == again and count == len(again)
    if "tensorboard" in INSTALLED:
        assert len(list((workdir / "tb" / "logged").glob("trial-*"))) == len(again)
    if "wandb" in INSTALLED:
        runs = offline_runs(workdir / "wb" / "wandb")
        numbers = [int(r.summary["advisor.trial"]) for r in runs if r.job_type == "trial"]
        assert sorted(numbers) == sorted(again)  # each once
        assert len([r for r in runs if r.job_type == "study"]) == 2  # a study run for each run of advisor tune

    # confirmed once more, separately: the new pairs go to the runs tune logged, no trial again
    def confirmed_now() -> dict[int, Confirmation]:
        attrs = optuna.load_study(study_name="logged", storage="sqlite:///advisor.db").user_attrs
        return {int(k.split(":")[1]): Confirmation.from_dict(v) for k, v in attrs.items() if k.startswith(CONFIRMATION)}

    before = {n: len(c.pairs) for n, c in confirmed_now().items()}
    code = main(["confirm", "--study", "logged", "--pairs", str(max(before.values()) + 1), "--confirm-top", "1",
                 "--json", "--log-to", log_to])
    out, err = capsys.readouterr()
    assert code == 0, err
    after = confirmed_now()
    grown = {n: len(c.pairs) for n, c in after.items() if len(c.pairs) > before.get(n, 0)}
    if "nothing to confirm" in err:  # the resumed study's front is the baseline alone: no pair, nothing logged
        assert not grown and "logging the confirmation pairs" not in err
    else:
        assert "logging the confirmation pairs as they land to " in err and "--log-to" not in err
        assert grown, (before, after)  # the front's top candidate (after the resume) got pairs
    if "mlflow" in INSTALLED:
        [parent], trials, count = logged_by_mlflow(uri)
        assert set(trials) == again and count == len(again)
        for number, pairs in grown.items():
            assert trials[number].data.metrics["confirmed/pairs"] == pairs
        assert parent.info.status == "FINISHED"
    if "tensorboard" in INSTALLED:
        assert len(list((workdir / "tb" / "logged").glob("trial-*"))) == len(again)
    if "wandb" in INSTALLED:
        runs = offline_runs(workdir / "wb" / "wandb")
        confirming = [r for r in runs if r.job_type == "confirmation"]
        assert len(confirming) == (1 if grown else 0)
        for number, pairs in grown.items():
            assert confirming[0].summary[f"confirmation/trial_{number}/pairs"] == pairs
        assert len([r for r in runs if r.job_type == "trial"]) == len(again)
