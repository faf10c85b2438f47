"""Defaults from [tool.advisor] in the project's pyproject.toml: real `advisor` runs in a
project folder (commands that fail fast or only read a study, no study is run)."""

from __future__ import annotations

import json
import shutil

import pytest

from advisor.cli import project_defaults
from advisor.cli.main import parser

from conftest import EXAMPLES, REPO, exit_status

OLD_STUDY = REPO / "tests" / "data" / "study_before_layers.sqlite"
MODEL = str(EXAMPLES / "digits_mlp.py")


@pytest.fixture
def project(workdir):
    """A project folder (the working directory) with a copy of a recorded study in studies.db."""
    shutil.copy(OLD_STUDY, workdir / "studies.db")
    return workdir


def write(folder, table: str) -> None:
    (folder / "pyproject.toml").write_text(f'[project]\nname = "mine"\n\n{table}')


def run(argv, capsys):
    code = exit_status(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_table_values_are_the_defaults(project, capsys):
    write(project, '[tool.advisor]\nstorage = "sqlite:///studies.db"\njson = true\n')
    code, out, err = run(["studies"], capsys)
    assert code == 0, err
    assert [s["study"] for s in json.loads(out)["studies"]] == ["compat"]
    assert f'from [tool.advisor] in {project / "pyproject.toml"}: storage = "sqlite:///{project}/studies.db", ' \
           "json = true" in err


def test_tune_options_from_the_table_reach_the_command(project, capsys):
    """The table's value is what tune checks (refused at once: no study runs)."""
    write(project, '[tool.advisor]\ntrials = 0\n')
    code, _, err = run(["tune", MODEL], capsys)
    assert code == 2 and "--trials must be at least 1, found 0" in err
    write(project, '[tool.advisor]\nsampler = "magic"\n')
    code, _, err = run(["tune", MODEL], capsys)
    assert code == 2 and "--sampler 'magic' is unknown" in err
    assert sorted(p.name for p in project.iterdir()) == ["pyproject.toml", "studies.db"]


def parsed(argv, folder):
    p = parser()
    args = p.parse_args(argv)
    project_defaults.apply_project_defaults(p, args, argv, start=folder)
    return args


def test_the_command_line_wins(project, monkeypatch):
    monkeypatch.delenv("ADVISOR_CONFIRM")  # set for every test (conftest); it would win over the table
    write(project, '[tool.advisor]\ntrials = 50\nspace = "gpu"\nmax-metric-drop = "2%"\nconfirm = false\n'
                   'storage = "sqlite:///studies.db"\n')
    args = parsed(["tune", MODEL], project)
    assert (args.trials, args.space, args.max_metric_drop, args.confirm) == (50, "gpu", (0.02, True), False)
    assert args.storage == f"sqlite:///{project}/studies.db"
    args = parsed(["tune", MODEL, "--trials", "7", "--space=eager", "--confirm", "--storage", "sqlite:///x.db"],
                  project)
    assert (args.trials, args.space, args.confirm, args.storage) == (7, "eager", True, "sqlite:///x.db")
    # --max-accuracy-drop is the other name of --max-metric-drop: given, the table's is not used
    args = parsed(["tune", MODEL, "--max-accuracy-drop", "0.05"], project)
    assert args.max_accuracy_drop == (0.05, False) and args.max_metric_drop is None


def test_the_environment_wins_over_the_table(project, monkeypatch):
    write(project, '[tool.advisor]\nstorage = "sqlite:///studies.db"\nmetric-seeds = 5\nconfirm = true\n')
    monkeypatch.setenv("ADVISOR_STORAGE", "sqlite:///other.db")
    args = parsed(["tune", MODEL], project)
    assert args.storage is None and args.metric_seeds is None and args.confirm is None  # $ADVISOR_... rule
    monkeypatch.delenv("ADVISOR_STORAGE")
    monkeypatch.delenv("ADVISOR_METRIC_SEEDS")
    monkeypatch.setenv("ADVISOR_ACCURACY_SEEDS", "2")  # the variable's older name wins over the table too
    assert parsed(["tune", MODEL], project).metric_seeds is None
    monkeypatch.delenv("ADVISOR_ACCURACY_SEEDS")
    args = parsed(["tune", MODEL], project)
    assert args.storage == f"sqlite:///{project}/studies.db" and args.metric_seeds == 5
    write(project, '[tool.advisor]\naccuracy-seeds = 4\n')  # the option's older key still reads
    assert parsed(["tune", MODEL], project).accuracy_seeds == 4


def test_a_commands_own_table_wins_over_the_shared_keys(project, monkeypatch):
    monkeypatch.delenv("ADVISOR_CONFIRM")
    write(project, '[tool.advisor]\njson = true\nno-tui = true\n\n[tool.advisor.commands.trials]\njson = false\n\n'
                   '[tool.advisor.commands.tune]\nno-confirm = true\n')
    assert parsed(["trials"], project).json is False
    assert parsed(["studies"], project).json is True
    tune = parsed(["tune", MODEL], project)
    assert tune.json is True and tune.no_tui is True and tune.confirm is False


def test_the_nearest_pyproject_is_read_and_storage_is_the_projects(project, capsys, monkeypatch):
    write(project, '[tool.advisor]\nstorage = "sqlite:///studies.db"\n')
    (project / "src" / "pkg").mkdir(parents=True)
    monkeypatch.chdir(project / "src" / "pkg")  # below the project folder: the same study database
    code, out, err = run(["trials", "compat", "--json"], capsys)
    assert code == 0 and json.loads(out)["study"] == "compat", err
    write(project / "src", "")  # a nearer pyproject.toml without the table: nothing applies
    code, _, err = run(["trials", "compat"], capsys)
    assert code == 2 and "advisor.db does not exist" in err
    assert not (project / "src" / "pkg" / "advisor.db").exists()


def test_unknown_keys_and_wrong_types_are_listed_together(project, capsys):
    write(project, '[tool.advisor]\ntrails = 50\ntrials = "fifty"\nconfirm = "yes"\nworkload = "serve"\n'
                   'memory-cap = 2\nknob = "compile"\n\n[tool.advisor.commands.tuen]\ntrials = 5\n')
    code, out, err = run(["studies"], capsys)
    assert code == 2 and out == ""
    assert f"advisor studies: error: {project / 'pyproject.toml'}: [tool.advisor] is invalid:" in err
    for line in ["- [tool.advisor] trails: unknown key (did you mean trials?)",
                 "- [tool.advisor] trials: expected a whole number, found 'fifty' (a string) (advisor tune --trials)",
                 "- [tool.advisor] confirm: expected true or false, found 'yes' (a string)",
                 "- [tool.advisor] workload: expected one of train, inference, found 'serve'",
                 "- [tool.advisor] memory-cap: expected a string, found 2 (a whole number)",
                 "- [tool.advisor] knob: expected a list of strings",
                 "- [tool.advisor.commands.tuen]: unknown command (did you mean tune?)"]:
        assert line in err, err
    assert sorted(p.name for p in project.iterdir()) == ["pyproject.toml", "studies.db"]
    listed = err.split("(keys are the long options of the advisor commands: ")[1]
    assert "metric-seeds" in listed and "accuracy" not in listed  # older names still read, not offered
    write(project, '[tool.advisor]\naccuracy-seedz = 2\n')
    err = run(["studies"], capsys)[2]
    assert "accuracy-seedz: unknown key" in err and "did you mean accuracy-seeds" not in err


def test_a_key_of_another_command_in_a_commands_table_is_unknown(project, capsys):
    write(project, '[tool.advisor.commands.studies]\ntrials = 5\n')
    code, _, err = run(["studies"], capsys)
    assert code == 2 and "[tool.advisor.commands.studies] trials: unknown key (expected one of json, storage)" in err


def test_bad_toml_holding_the_table_is_exit_2_and_other_bad_toml_is_not_ours(project, capsys):
    write(project, "[tool.advisor]\ntrials = \n")
    code, _, err = run(["studies", "--storage", "sqlite:///studies.db"], capsys)
    assert code == 2 and "pyproject.toml: not valid TOML" in err
    write(project, "[tool.black\nline-length = \n")
    code, _, err = run(["studies", "--storage", "sqlite:///studies.db"], capsys)
    assert code == 0, err


def test_without_a_toml_reader_the_table_is_refused(project, capsys, monkeypatch):
    """Python 3.10 without tomli, made here by replacing the reader lookup (this runs on 3.11+)."""
    monkeypatch.setattr(project_defaults, "_toml", lambda: None)
    write(project, '[tool.advisor]\ntrials = 5\n')
    code, _, err = run(["studies", "--storage", "sqlite:///studies.db"], capsys)
    assert code == 2 and "needs Python 3.11 or later (tomllib), or the tomli package" in err
    write(project, '[tool.ruff]\nline-length = 100\n')  # no table of ours: nothing to read
    code, _, err = run(["studies", "--storage", "sqlite:///studies.db"], capsys)
    assert code == 0, err


def test_help_and_version_do_not_read_the_table(project, capsys):
    write(project, "[tool.advisor]\nnonsense = 1\n")
    assert exit_status(["--version"]) == 0 and exit_status(["studies", "--help"]) == 0
