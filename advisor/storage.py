"""Optuna storage: URL checks, opening, and reading trials back as advisor records."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.errors import StudyError

if TYPE_CHECKING:
    import optuna

DEFAULT_STORAGE = "sqlite:///advisor.db"
OBJECTIVES = ("throughput", "peak_memory_bytes", "accuracy")
DIRECTIONS = ("maximize", "minimize", "maximize")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$")


def storage_url(explicit: str | None) -> str:
    """--storage, else $ADVISOR_STORAGE, else sqlite:///advisor.db in the working directory."""
    return explicit or os.environ.get("ADVISOR_STORAGE") or DEFAULT_STORAGE


def check_study_name(name: str) -> str:
    if not _NAME.match(name):
        raise StudyError(f"study name {name!r} is invalid: use 1-128 letters, digits and . _ : + - "
                         "(starting with a letter or digit)")
    return name


def _journal_path(url: str) -> Path | None:
    if url.startswith("journal:") or ("://" not in url and url.endswith((".log", ".jsonl"))):
        return Path(url.removeprefix("journal:"))
    return None


def check_storage(url: str, must_exist: bool = False) -> None:
    """Report a bad URL, an unusable path or an unreachable database, writing nothing.

    A SQLite or journal file is only checked (its directory exists and is writable);
    another database URL is connected to once.
    """
    journal = _journal_path(url)
    if journal is not None:
        _check_file(journal, url, must_exist)
        return
    if "://" not in url:
        raise StudyError(f"storage {url!r} is not a storage URL: expected e.g. sqlite:///advisor.db, "
                         "postgresql://user@host/db, or journal:PATH")
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        _check_file(path, url, must_exist)
        if path.exists():
            _check_sqlite(path, url)
        return
    import sqlalchemy

    try:
        with sqlalchemy.create_engine(url).connect():
            pass
    except (ImportError, sqlalchemy.exc.NoSuchModuleError) as exc:
        raise StudyError(f"storage {url!r} needs a database driver that is not installed "
                         f"({type(exc).__name__}: {_first_line(exc)})") from None
    except Exception as exc:
        raise StudyError(f"storage {url!r} cannot be reached: {type(exc).__name__}: {_first_line(exc)}") from None


def _check_sqlite(path: Path, url: str, timeout_s: float = 2.0) -> None:
    """An existing SQLite file must be a database that this process can lock for writing
    (taking the write lock and releasing it at once writes nothing)."""
    import sqlite3

    try:
        con = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
        try:
            con.execute("BEGIN IMMEDIATE")
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            con.execute("ROLLBACK")
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        text = str(exc)
        if "locked" in text:
            raise StudyError(f"storage {url!r}: {path} is locked by another process (another `advisor tune` "
                             f"writing to it?); waited {timeout_s:.0f} s") from None
        raise StudyError(f"storage {url!r}: {path} is not a usable SQLite database ({text})") from None


def open_storage(url: str, must_exist: bool = False) -> Any:
    """Open an Optuna storage after ``check_storage``.

    ``sqlite:///path.db`` and other SQLAlchemy URLs open an RDBStorage; a path ending in
    ``.log`` or ``.jsonl`` (or ``journal:PATH``) opens a JournalFileBackend.
    """
    import optuna

    check_storage(url, must_exist)
    journal = _journal_path(url)
    if journal is not None:
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(str(journal)))
    sqlite = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
    new = sqlite is not None and not sqlite.exists()
    try:
        storage = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 30}}
                                             if url.startswith("sqlite") else None)
    except Exception as exc:
        raise StudyError(f"storage {url!r} cannot be opened: {type(exc).__name__}: {_first_line(exc)}") from None
    if new and sqlite.exists():
        os.chmod(sqlite, 0o600)  # studies may name private paths: readable by the user only
    return storage


def _check_file(path: Path, url: str, must_exist: bool) -> None:
    if path.is_dir():
        raise StudyError(f"storage {url!r}: {path} is a directory, expected a file")
    if must_exist and not path.exists():
        raise StudyError(f"storage {url!r}: {path} does not exist (no study has been run there yet)")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise StudyError(f"storage {url!r}: directory {parent} does not exist")
    if not parent.is_dir():
        raise StudyError(f"storage {url!r}: {parent} is not a directory")
    if not os.access(parent if not path.exists() else path, os.W_OK):
        raise StudyError(f"storage {url!r}: {path if path.exists() else parent} is not writable")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


def study_names(storage: Any) -> list[str]:
    import optuna

    return [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]


def load(storage: Any, name: str | None) -> optuna.Study:
    """Load a study by name; with no name, the only study in the storage."""
    import optuna

    names = study_names(storage)
    if not names:
        raise StudyError("the storage holds no study yet: run `advisor tune model.py` first")
    if name is None:
        if len(names) > 1:
            raise StudyError(f"the storage holds {len(names)} studies; choose one with --study ({', '.join(names)})")
        name = names[0]
    if name not in names:
        raise StudyError(f"no study named {name!r} in the storage (studies: {', '.join(names)})")
    return optuna.load_study(study_name=name, storage=storage)


# stopped by the user, a dead driver, a lost cluster node or a GPU still held by another
# process: not the configuration's doing
NOT_COUNTED = ("interrupted", "cancelled", "node_lost", "device_busy")


def measured(trial: optuna.trial.FrozenTrial) -> bool:
    """A trial that counts towards --trials: it completed, or its configuration failed.

    Duplicates (answered from an earlier trial), configurations skipped without running
    (knob values that cannot be combined) and trials cut short by Ctrl-C, the study's
    --timeout or a killed driver do not count; resuming runs the cut-short ones again.
    """
    if "duplicate_of" in trial.user_attrs or trial.user_attrs.get("skipped"):
        return False
    if trial.state.name == "FAIL":
        return trial.user_attrs.get("failure_class") not in NOT_COUNTED
    return trial.state.name == "COMPLETE"


def tell_result(study: optuna.Study, trial: optuna.Trial, result: Any, wall_s: float,
                baseline_accuracy: float | None, max_accuracy_drop: float,
                memory_cap: int | None = None) -> optuna.trial.FrozenTrial:
    """Store one trial's TrialResult: every figure as a user attribute, the objectives, and
    the constraints (accuracy drop vs the baseline, memory cap); a failure as FAIL."""
    import optuna

    attrs = result.to_dict()
    attrs.pop("ok")
    for key, value in attrs.items():
        if value is not None:
            trial.set_user_attr(key, value)
    trial.set_user_attr("wall_s", wall_s)
    if not result.ok:
        return study.tell(trial, state=optuna.trial.TrialState.FAIL)
    reference = result.accuracy if baseline_accuracy is None else baseline_accuracy
    trial.set_constraint("accuracy_drop", (reference - result.accuracy) - max_accuracy_drop)
    if memory_cap is not None:
        trial.set_constraint("memory_cap", result.peak_memory_bytes - memory_cap)
    return study.tell(trial, [result.throughput, result.peak_memory_bytes, result.accuracy])


def baseline_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The completed baseline trial (trial 0 unless it had to be re-run), or None."""
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("baseline") and t.state.name == "COMPLETE":
            return t
    return None


def pareto_front(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The feasible Pareto front (Optuna honours set_constraint), duplicates left out."""
    return sorted((t for t in study.best_trials if "duplicate_of" not in t.user_attrs), key=lambda t: t.number)
