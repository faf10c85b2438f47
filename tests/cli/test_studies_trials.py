"""`advisor studies` and `advisor trials STUDY`: what a storage holds, read from real SQLite
studies (a copy of one recorded by a real `advisor tune`, and one written through the
strategy's own record_result with fixed figures: tests/recorded_study.py)."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import REPO, exit_status
from recorded_study import add_probed_trial, write_recorded_study

OLD_STUDY = REPO / "tests" / "data" / "study_before_layers.sqlite"


@pytest.fixture
def two_studies(workdir):
    """./runs.db: 'compat' (4 completed trials of digits_mlp.py, recorded by a real run) and
    'digits_cnn-cpu' (11 trials with fixed figures: a front, infeasible ones, an oom and an
    error) plus a probed-only trial."""
    shutil.copy(OLD_STUDY, workdir / "runs.db")
    url = "sqlite:///runs.db"
    add_probed_trial(write_recorded_study(url))
    return url


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = exit_status(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_studies_lists_each_study_with_its_counts(two_studies, capsys):
    code, out, err = run(["studies", "--storage", two_studies], capsys)
    assert code == 0, err
    lines = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 3}
    assert set(lines) == {"compat", "digits_cnn-cpu"}
    assert "/work/main/examples/digits_mlp.py" in lines["compat"] and "compat_space" in lines["compat"]
    assert "4 complete" in lines["compat"] and "2026-11-23 18:2" in lines["compat"]
    assert "9 complete, 1 probed, 2 failed" in lines["digits_cnn-cpu"]
    assert "accuracy (higher is better)" in lines["digits_cnn-cpu"]


def test_studies_json(two_studies, capsys):
    code, out, _ = run(["studies", "--storage", two_studies, "--json"], capsys)
    document = json.loads(out)
    assert code == 0 and document["format"] == "advisor.studies/1" and document["storage"] == two_studies
    studies = {s["study"]: s for s in document["studies"]}
    assert studies["compat"]["states"] == {"complete": 4} and studies["compat"]["space"] == "compat_space"
    assert studies["compat"]["started"].startswith("2026-11-23T18:27")
    assert studies["compat"]["last_finished"] >= studies["compat"]["started"]
    cnn = studies["digits_cnn-cpu"]
    assert cnn["trials"] == 12 and cnn["states"] == {"complete": 9, "probed": 1, "failed": 2}
    assert cnn["objectives"] == {"throughput": "maximize", "peak_memory_bytes": "minimize", "accuracy": "maximize"}
    assert cnn["max_metric_drop"] == 0.01 and cnn["baseline"] is True


def test_trials_lists_every_trial_against_the_baseline(two_studies, capsys):
    code, out, err = run(["trials", "digits_cnn-cpu", "--storage", two_studies], capsys)
    assert code == 0, err
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 3}
    assert list(rows) == ["0 (baseline)", *map(str, range(1, 12))]
    assert "bs=64 bf16" in rows["1"] and "10,240" in rows["1"] and "100.2 MiB" in rows["1"]
    assert "1.52x unconfirmed" in rows["1"] and "0.9639" in rows["1"] and "-0.3 pt" in rows["1"]
    assert "complete (infeasible)" in rows["5"]
    assert "failed" in rows["8"] and "[oom] CUDA out of memory" in rows["8"]
    assert "[error] RuntimeError: mat1 and mat2" in rows["9"]
    assert "probed" in rows["11"] and "3,000" in rows["11"] and "120.0 MiB" in rows["11"]


@pytest.mark.parametrize("columns", [100, 130, 170])
def test_a_narrow_table_wraps_between_words_and_never_cuts_one(two_studies, capsys, monkeypatch, columns):
    """COLUMNS is honoured when piped (without it, one line per row), every line fits it,
    and a figure's words ("1.52x", "unconfirmed", "100.2", "MiB") are never cut: where the
    table is wider than the console, the text columns (configuration, failure) give way
    first; nothing ends in an ellipsis."""
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, err = run(["trials", "digits_cnn-cpu", "--storage", two_studies], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns and "…" not in out
    words = {w for line in lines for cell in line.split("│")[1:-1] for w in cell.split()}
    if columns >= 130:  # wide enough for every figure's longest word
        assert {"1.52x", "unconfirmed", "100.2", "MiB", "10,240", "0.9639"} <= words
    monkeypatch.delenv("COLUMNS")
    code, out, _ = run(["trials", "digits_cnn-cpu", "--storage", two_studies], capsys)
    rows = [line for line in out.splitlines() if line.count("│") > 3]
    assert len(rows) == 12 and any("1.52x unconfirmed" in row for row in rows)  # unwrapped in a pipe


def test_trials_json(two_studies, capsys):
    code, out, _ = run(["trials", "digits_cnn-cpu", "--storage", two_studies, "--json"], capsys)
    document = json.loads(out)
    assert code == 0 and document["format"] == "advisor.trials/2" and document["baseline"] == 0
    trials = document["trials"]
    assert [t["trial"] for t in trials] == list(range(12))
    assert trials[1]["config"]["precision"] == "bf16" and trials[1]["metric_value"] == pytest.approx(0.9639)
    assert trials[1]["vs_baseline"]["throughput_ratio"] == pytest.approx(10240 / 6736)
    assert trials[5]["feasible"] is False and trials[1]["feasible"] is True
    assert trials[8]["state"] == "failed" and trials[8]["failure_class"] == "oom" and trials[8]["throughput"] is None
    assert trials[11]["state"] == "probed" and trials[11]["throughput"] == 3000.0 and trials[11]["metric_value"] is None


def test_trials_of_the_only_study_by_default(workdir, capsys, monkeypatch):
    shutil.copy(OLD_STUDY, workdir / "old.db")
    monkeypatch.setenv("ADVISOR_STORAGE", "sqlite:///old.db")
    code, out, err = run(["trials", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["study"] == "compat"


def test_unknown_study_is_exit_2_naming_the_studies(two_studies, capsys):
    code, out, err = run(["trials", "nope", "--storage", two_studies], capsys)
    assert code == 2 and out == ""
    assert "no study named 'nope'" in err and "(studies: compat, digits_cnn-cpu)" in err


def test_several_studies_and_none_named_is_exit_2(two_studies, capsys):
    code, _, err = run(["trials", "--storage", two_studies], capsys)
    assert code == 2 and "choose one" in err and "compat, digits_cnn-cpu" in err


@pytest.mark.parametrize("command", [["studies"], ["trials", "compat"], ["studies", "--json"]])
@pytest.mark.parametrize("storage", [None, "sqlite:///elsewhere.db"])
def test_a_missing_sqlite_file_is_exit_2_and_not_created(command, storage, workdir, capsys):
    code, out, err = run([*command, *(["--storage", storage] if storage else [])], capsys)
    assert code == 2 and out == ""
    assert "does not exist" in err and ("advisor.db" if storage is None else "elsewhere.db") in err
    assert list(workdir.iterdir()) == []


def test_an_empty_storage_lists_no_study(workdir, capsys):
    from advisor.study.storage.stores import open_storage

    open_storage("sqlite:///empty.db")  # an Optuna database with no study in it
    code, out, _ = run(["studies", "--storage", "sqlite:///empty.db"], capsys)
    assert code == 0 and "holds no study yet" in out
    code, out, _ = run(["studies", "--storage", "sqlite:///empty.db", "--json"], capsys)
    assert code == 0 and json.loads(out)["studies"] == []
    code, _, err = run(["trials", "--storage", "sqlite:///empty.db"], capsys)
    assert code == 2 and "holds no study yet" in err


def test_the_recorded_file_is_not_changed(two_studies):
    """Reading never writes: the copied database is byte-for-byte the file in tests/data
    after a listing (the recorded study was added to a second copy)."""
    import hashlib

    from conftest import exit_status as status

    path = REPO / "tests" / "data" / "study_before_layers.sqlite"
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    assert status(["studies", "--storage", f"sqlite:///{path}"]) == 0
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_reader_that_leaves_early_gets_no_traceback(two_studies):
    """`advisor trials --json | head -1`: stdout's reader is gone before the document is written."""
    import os
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-m", "advisor", "trials", "digits_cnn-cpu", "--storage", two_studies,
                              "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    child.stdout.close()  # long before the child, still importing, writes
    err = child.stderr.read().decode()
    assert child.wait() == 141 and "Traceback" not in err, err


@pytest.mark.parametrize("command", ["studies", "trials"])
def test_help_ends_with_examples(command, capsys):
    assert exit_status([command, "--help"]) == 0
    out = capsys.readouterr().out.rstrip()
    assert "examples:" in out and out.splitlines()[-1].strip().startswith("advisor ")


def test_another_programs_optuna_study_is_left_alone_and_never_crashes_a_command(two_studies, capsys, workdir):
    """A storage shared with other code's Optuna studies (one objective, no workload): listed
    apart, refused by name with exit 2, never read as advisor's, and `advisor tune` adds no
    trial to one of the same name."""
    import optuna

    plain = optuna.create_study(study_name="plain", storage=two_studies)
    plain.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    code, out, err = run(["studies", "--storage", two_studies], capsys)
    assert code == 0, err
    assert "also in this storage, not written by advisor (left alone): plain" in out
    code, out, err = run(["studies", "--storage", two_studies, "--json"], capsys)
    assert code == 0 and json.loads(out)["other_studies"] == ["plain"]
    for command in (["trials", "plain"], ["export", "--study", "plain"], ["report", "--study", "plain"],
                    ["confirm", "--study", "plain"]):
        code, out, err = run([*command, "--storage", two_studies], capsys)
        assert code == 2, (command, err)
        assert "study 'plain' in storage 'sqlite:///runs.db' is another program's Optuna study, not advisor's" in err
    (workdir / "model.py").write_text((REPO / "examples" / "digits_mlp.py").read_text())
    code, out, err = run(["tune", "model.py", "--study", "plain", "--storage", two_studies, "--no-tui"], capsys)
    assert code == 2 and "a study named 'plain' in sqlite:///runs.db is another program's Optuna study" in err
    assert len(optuna.load_study(study_name="plain", storage=two_studies).trials) == 2  # nothing added


def test_a_storage_of_other_programs_studies_only_says_so(workdir, capsys):
    import optuna

    optuna.create_study(study_name="theirs", storage="sqlite:///theirs.db")
    code, out, err = run(["trials", "--storage", "sqlite:///theirs.db"], capsys)
    assert code == 2
    assert ("holds no advisor study yet (it holds other Optuna studies, not advisor's: theirs): run `advisor tune "
            "model.py` first") in err


def test_a_queued_seed_is_shown_as_queued_with_its_configuration(two_studies, capsys):
    """A study that ran out of --trials with a one-knob seed still queued listed a bare
    'waiting' row without a configuration (a reviewer took it for a phantom trial)."""
    import optuna

    from advisor.core.config import TrialConfig
    from advisor.core.stored import SEED_CONFIG

    study = optuna.load_study(study_name="digits_cnn-cpu", storage=two_studies)
    study.enqueue_trial({}, user_attrs={SEED_CONFIG: TrialConfig(batch_size=128).to_dict()})
    code, out, err = run(["trials", "digits_cnn-cpu", "--storage", two_studies], capsys)
    assert code == 0, err
    row = next(line for line in out.splitlines() if "queued" in line)
    assert "queued (runs on resume)" in row and "bs=128 fp32" in row
    code, out, _ = run(["studies", "--storage", two_studies], capsys)
    assert "1 queued (runs on resume)" in out and "waiting" not in out
    code, out, _ = run(["trials", "digits_cnn-cpu", "--storage", two_studies, "--json"], capsys)
    queued = json.loads(out)["trials"][-1]
    assert queued["state"] == "waiting"  # the JSON keeps Optuna's word
    assert queued["config"]["batch_size"] == 128 and queued["description"] == "bs=128 fp32"  # as the table shows


def test_a_duplicate_points_to_its_earlier_trial_and_a_disturbed_baseline_shows_its_reference(two_studies, capsys):
    """A review saw a duplicate row show a stale copy of its earlier trial's figures (and
    another none at all, with no configuration), and the baseline's disturbed first run
    beside ratios that are to its re-measured reference."""
    import time

    import optuna

    from advisor.core.stored import BASELINE_DISTURBED, BASELINE_MEASUREMENTS, DUPLICATE_OF

    study = optuna.load_study(study_name="digits_cnn-cpu", storage=two_studies)
    stale = optuna.trial.create_trial(values=[1.0, 1.0, 0.5], user_attrs={DUPLICATE_OF: 1}, system_attrs={})
    study.add_trial(stale)  # the figures it was answered with before trial 1 learnt more
    study.set_user_attr(BASELINE_DISTURBED, "its first run: the noise sentinel read 2.0x apart")
    study.set_user_attr(BASELINE_MEASUREMENTS, [{"at": time.time(), "after_trial": 0, "throughput": 9000.0,
                                                 "peak_memory_bytes": 98.6 * 2**20}] * 2)
    code, out, err = run(["trials", "digits_cnn-cpu", "--storage", two_studies], capsys)
    assert code == 0, err
    row = next(line for line in out.splitlines() if "duplicate of 1" in line)
    assert "bs=64 bf16" in row and "0.5000" not in row and "1.00x" not in row
    base = next(line for line in out.splitlines() if "(baseline)" in line)
    assert "9,000" in base and "6,736" not in base
    assert "The baseline's first run was disturbed" in " ".join(out.split())
    code, out, _ = run(["trials", "digits_cnn-cpu", "--storage", two_studies, "--json"], capsys)
    dup = json.loads(out)["trials"][-1]
    assert dup["duplicate_of"] == 1 and dup["config"]["precision"] == "bf16" and dup["throughput"] is None


def test_a_trial_cut_short_is_listed_as_such_not_as_failed(two_studies, capsys):
    """A review saw a cancelled trial listed 'failed' by `advisor trials` and counted among
    '2 failed' by `advisor studies`, while tune and the report counted no failure."""
    import optuna

    study = optuna.load_study(study_name="digits_cnn-cpu", storage=two_studies)
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={
        "config": {"batch_size": 16}, "failure_class": "cancelled", "failure_message": "cancelled: interrupted"}))
    code, out, _ = run(["studies", "--storage", two_studies], capsys)
    assert "9 complete, 1 probed, 2 failed, 1 cut short" in " ".join(out.split())
    code, out, _ = run(["trials", "digits_cnn-cpu", "--storage", two_studies], capsys)
    assert "cut short" in next(line for line in out.splitlines() if "[cancelled]" in line)


def test_trials_takes_study_as_the_other_commands_do(two_studies, capsys):
    """`advisor trials --study NAME` was 'unrecognized arguments' (export, report and tui take it)."""
    code, out, err = run(["trials", "--study", "digits_cnn-cpu", "--storage", two_studies, "--json"], capsys)
    assert code == 0, err and json.loads(out)["study"] == "digits_cnn-cpu"
    code, _, err = run(["trials", "compat", "--study", "digits_cnn-cpu", "--storage", two_studies], capsys)
    assert code == 2 and "two studies named" in err


def test_a_reader_that_leaves_early_from_a_rich_table_gets_141_too(tmp_path):
    """`advisor hardware | head -1`: rich meets the broken pipe itself (it points stdout at
    /dev/null and exits 1); the status is still the documented 141, with nothing on stderr."""
    import os
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-m", "advisor", "hardware"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path)})
    child.stdout.close()  # long before the child, still importing, writes
    err = child.stderr.read().decode()
    assert child.wait() == 141 and err == "", err
