"""Bad input to `advisor tune` beyond model.py (whose contract has its own table in
test_workload.py): each row is refused with exit status 2, a message naming what is wrong,
and nothing written (no study, no storage file)."""

from __future__ import annotations

import pytest

from conftest import EXAMPLES, exit_status

MODEL = str(EXAMPLES / "digits_mlp.py")

# (id, space file text or None, extra arguments, what stderr must say)
ROWS = [
    ("space-missing", None, ["--space", "nope.yaml"], "no such file, and not a shipped preset"),
    ("space-a-directory", None, ["--space", "/"], "is a directory, expected a search space YAML file or a preset"),
    ("space-not-yaml", "batch_size: [\n", [], "not valid YAML"),
    ("space-empty", "", [], "an empty file"),
    ("space-unknown-key", "batchsize: {choices: [64]}\n", [], "batchsize: unknown knob"),
    ("space-wrong-type", "batch_size: {choices: 64}\n", [], "batch_size.choices: expected a list"),
    ("space-bad-value", "precision: {choices: [fp64]}\n", [], "expected one of"),
    ("space-empty-choices", "precision: {choices: []}\n", [], "precision.choices: is empty"),
    ("space-low-above-high", "batch_size: {low: 64, high: 16}\n", [], "low (64) is greater than high (16)"),
    ("space-no-power-of-two", "batch_size: {low: 33, high: 63}\n", [], "no power of two lies in [33, 63]"),
    ("space-bad-condition", "compile_mode: {choices: [default], when: {compile: maybe}}\n", [], "compile_mode.when"),
    ("space-nothing-runs-here", "precision: {choices: [tf32]}\n", [], "no option can run on this machine"),
    ("trials-zero", "batch_size: 32\n", ["--trials", "0"], "--trials must be at least 1"),
    ("timeout-negative", "batch_size: 32\n", ["--timeout", "-5"], "--timeout must be a positive number"),
    ("trial-timeout-zero", "batch_size: 32\n", ["--trial-timeout", "0"], "--trial-timeout must be a positive number"),
    ("timing-tolerance-zero", "batch_size: 32\n", ["--timing-tolerance", "0"],
     "--timing-tolerance must be a fraction between 0 and 1 (0.05: +-5%), found 0.0"),
    ("timing-tolerance-garbage", "batch_size: 32\n", ["--timing-tolerance", "tight"], "invalid float value"),
    ("seed-negative", "batch_size: 32\n", ["--seed", "-1"], "--seed must be between 0 and 42949672"),
    ("seed-too-large", "batch_size: 32\n", ["--seed", "4294967296"], "found 4294967296"),
    ("seed-garbage", "batch_size: 32\n", ["--seed", "1.5"], "invalid int value"),
    ("train-samples-zero", "batch_size: 32\n", ["--train-samples", "0"], "--train-samples must be at least 1"),
    ("accuracy-drop-negative", "batch_size: 32\n", ["--max-accuracy-drop", "-1"],
     "argument --max-accuracy-drop: must be a finite amount >= 0, found '-1'"),
    ("metric-drop-negative", "batch_size: 32\n", ["--max-metric-drop=-0.5%"], "must be a finite amount >= 0"),
    ("metric-drop-over-100", "batch_size: 32\n", ["--max-metric-drop", "150%"], "a percentage must be at most 100%"),
    ("metric-drop-garbage", "batch_size: 32\n", ["--max-metric-drop", "lots"],
     "expected an amount of the metric such as 0.01, or a percentage of the baseline's such as 1%, found 'lots'"),
    ("metric-drop-twice", "batch_size: 32\n", ["--max-metric-drop", "1%", "--max-accuracy-drop", "0.01"],
     "not allowed with argument"),
    ("memory-cap-garbage", "batch_size: 32\n", ["--memory-cap", "lots"], "--memory-cap"),
    ("storage-not-url", "batch_size: 32\n", ["--storage", "advisor"], "is not a storage URL"),
    ("study-name", "batch_size: 32\n", ["--study", "../evil name"], "is invalid"),
    ("sampler-unknown", "batch_size: 32\n", ["--sampler", "magic"], "--sampler 'magic' is unknown"),
    ("workload-unknown", "batch_size: 32\n", ["--workload", "serve"], "invalid choice: 'serve'"),
    ("model-missing", "batch_size: 32\n", ["--model-path-placeholder"], "no-such-model.py"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_exit_2_with_a_message_and_nothing_written(row, workdir, capsys):
    name, space_text, extra, text = row
    args = ["tune", MODEL]
    if space_text is not None:
        (workdir / "space.yaml").write_text(space_text)
        args += ["--space", "space.yaml"]
    if extra == ["--model-path-placeholder"]:
        args[1], extra = str(workdir / "no-such-model.py"), []
    before = sorted(p.name for p in workdir.iterdir())
    code = exit_status([*args, *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert text in err, err
    assert sorted(p.name for p in workdir.iterdir()) == before  # no advisor.db, nothing else


def test_a_bad_storage_wait_is_refused_before_ray_starts(workdir, capsys, monkeypatch):
    monkeypatch.setenv("ADVISOR_STORAGE_WAIT", "soon")
    code = exit_status(["tune", MODEL, "--trials", "1"])
    out = capsys.readouterr()
    assert code == 2, out.err
    assert "$ADVISOR_STORAGE_WAIT is 'soon'" in out.err
    assert "ray " not in out.out and list(workdir.iterdir()) == []  # nothing started, nothing written


def _empty_storage(workdir):
    from advisor.study.storage.stores import open_storage

    open_storage("sqlite:///advisor.db")  # the schema, no study


def _recorded(workdir):
    from recorded_study import write_recorded_study

    write_recorded_study("sqlite:///advisor.db")


# the other commands: (id, set-up of the working directory, arguments, what stderr must say)
OTHER_ROWS = [
    ("tui-empty-storage", _empty_storage, ["tui"], "holds no study yet"),
    ("tui-no-storage", None, ["tui"], "advisor.db does not exist"),
    ("tui-unknown-study", _recorded, ["tui", "--study", "nope"], "no study named 'nope'"),
    ("export-empty-storage", _empty_storage, ["export"], "holds no study yet"),
    ("export-no-such-trial", _recorded, ["export", "--trial", "99"], "has no trial 99 (trials 0-10)"),
    ("export-failed-trial", _recorded, ["export", "--trial", "8"], "did not complete (oom)"),
    ("export-bad-pick", _recorded, ["export", "--pick", "cheapest"], "--pick 'cheapest' is unknown"),
    ("report-empty-storage", _empty_storage, ["report"], "holds no study yet"),
    ("measure-no-config", None, ["measure", MODEL, "--config", "best.yaml"], "best.yaml: cannot read config file"),
    ("measure-binary-config", lambda w: (w / "best.yaml").write_bytes(b"\xff\xfe\x00garbage"),
     ["measure", MODEL, "--config", "best.yaml"], "best.yaml: not a text file (byte 0 is not UTF-8)"),
    ("init-into-a-missing-folder", None, ["init", "no/such/folder/model.py"],
     "no/such/folder/model.py: cannot write it (No such file or directory)"),
]


@pytest.mark.parametrize("row", OTHER_ROWS, ids=[r[0] for r in OTHER_ROWS])
def test_other_commands_refuse_bad_input_with_exit_2(row, workdir, capsys):
    name, setup, args, text = row
    if setup is not None:
        setup(workdir)
    before = {p.name: p.stat().st_mtime_ns for p in workdir.iterdir()}
    code = exit_status(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert text in err, err
    assert {p.name: p.stat().st_mtime_ns for p in workdir.iterdir()} == before  # nothing written
