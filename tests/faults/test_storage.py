"""Storage that cannot be used is reported before any trial runs: exit status 2, a message
naming the storage and the problem, and nothing written."""

from __future__ import annotations

import os
import sqlite3

import pytest

from advisor.cli.main import main

from conftest import EXAMPLES


def _garbage(tmp):
    (tmp / "x.db").write_bytes(b"this is not a database" * 100)
    return "sqlite:///x.db"


def _file_as_dir(tmp):
    (tmp / "afile").write_text("")
    return "sqlite:///afile/x.db"


def _dir_as_file(tmp):
    (tmp / "adir").mkdir()
    return "sqlite:///adir"


CASES = {
    "missing directory": (lambda tmp: "sqlite:///nowhere/x.db", "directory nowhere does not exist"),
    "parent is a file": (_file_as_dir, "afile is not a directory"),
    "path is a directory": (_dir_as_file, "is a directory, expected a file"),
    "not a database": (_garbage, "is not a usable SQLite database"),
    "journal in a missing directory": (lambda tmp: "journal:nowhere/j.log", "does not exist"),
    "not a URL": (lambda tmp: "advisor.db", "is not a storage URL"),
    "in-memory SQLite": (lambda tmp: "sqlite://", "is an in-memory SQLite database"),  # was exit 1 after 60 s
    "in-memory SQLite by name": (lambda tmp: "sqlite:///:memory:", "is an in-memory SQLite database"),
    "SQLite URL options": (lambda tmp: "sqlite:///x.db?mode=ro", "has SQLite URL options ('mode=ro')"),  # was a file
    "RDB without its driver": (lambda tmp: "mysql+mysqldb://nobody@127.0.0.1:9/advisor",
                               "needs a database driver that is not installed"),
    "RDB server not listening": (lambda tmp: "postgresql+psycopg://nobody@127.0.0.1:9/advisor",
                                 "cannot be reached: OperationalError"),
    "RDB with a password": (lambda tmp: "postgresql+psycopg://nobody:SECRET@127.0.0.1:9/advisor",
                            "cannot be reached: OperationalError"),
}


def _snapshot(tmp):
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in tmp.iterdir()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_unusable_storage_is_refused_before_any_trial(case, workdir, capsys):
    make, text = CASES[case]
    url = make(workdir)
    before = _snapshot(workdir)
    code = main(["tune", str(EXAMPLES / "digits_mlp.py"), "--storage", url, "--trials", "2"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert text in err and repr(url.replace("SECRET", "***")) in err
    assert "SECRET" not in err  # a password is never shown
    assert _snapshot(workdir) == before  # nothing created or changed


@pytest.mark.parametrize("case", ["not a URL", "missing directory"])
def test_a_bad_storage_from_the_environment_says_so(case, workdir, capsys, monkeypatch):
    """No flag named it: the error says the storage is $ADVISOR_STORAGE's."""
    make, text = CASES[case]
    monkeypatch.setenv("ADVISOR_STORAGE", make(workdir))
    assert main(["tune", str(EXAMPLES / "digits_mlp.py"), "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert text in err and "(the storage is $ADVISOR_STORAGE's)" in err
    assert main(["tune", str(EXAMPLES / "digits_mlp.py"), "--trials", "2", "--storage", "nowhere.db"]) == 2
    assert "$ADVISOR_STORAGE" not in capsys.readouterr().err  # the flag's own value


def test_locked_sqlite_is_refused(workdir, capsys):
    """Another process holds the write lock (as a second `advisor tune` writing would)."""
    import optuna

    optuna.create_study(study_name="other", storage="sqlite:///advisor.db")
    holder = sqlite3.connect(workdir / "advisor.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        before = _snapshot(workdir)
        code = main(["tune", str(EXAMPLES / "digits_mlp.py"), "--trials", "2"])
        err = capsys.readouterr().err
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert code == 2
    assert "is locked by another process" in err
    assert _snapshot(workdir) == before
    assert [s.study_name for s in optuna.get_all_study_summaries("sqlite:///advisor.db")] == ["other"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere: permissions cannot be tested as root")
def test_unwritable_directory_is_refused(workdir, capsys):
    ro = workdir / "ro"
    ro.mkdir(mode=0o500)
    code = main(["tune", str(EXAMPLES / "digits_mlp.py"), "--storage", "sqlite:///ro/x.db"])
    assert code == 2 and "is not writable" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_a_directory_that_refuses_a_new_file_is_refused_before_anything_runs(workdir, capsys, monkeypatch):
    """/proc refuses a new file even to root, whom os.access lets write anywhere: the review
    that ran as root met a traceback and exit status 1, after the preflight."""
    import advisor.study.run.plan as plan_module

    def no_preflight(*args, **kwargs):
        raise AssertionError("the preflight ran before the storage was checked")

    monkeypatch.setattr(plan_module, "preflight", no_preflight)
    code = main(["tune", str(EXAMPLES / "digits_mlp.py"), "--no-tui", "--storage", "sqlite:////proc/advisor-x.db"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "storage 'sqlite:////proc/advisor-x.db': /proc/advisor-x.db cannot be created in /proc (" in err
    assert "Traceback" not in err and list(workdir.iterdir()) == []
