"""Optuna storage: URL checks, opening, and finding a study by name. Reading trials back is
``advisor.core.stored.read_trial``; writing them is the ledger's (``advisor.study.run._ledger``;
every trial ends in ``advisor.study.run._trial_writes``)."""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.core.errors import StudyError
from advisor.core.study_attrs import being_created
from advisor.core.study_attrs import is_advisor_study as is_advisor
from advisor.core.units import first_line
from advisor.study.storage.guard import open_guarded, shown_url, wait_s_from_env

if TYPE_CHECKING:
    import optuna

DEFAULT_STORAGE = "sqlite:///advisor.db"
CREATION_WAIT_S = 20.0  # how long a driver waits for a study another driver is creating to get its identity
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
    """Report a bad URL, an unusable path or an unreachable database, writing nothing; a
    storage that came from ``$ADVISOR_STORAGE`` is said to have (no flag named it).

    A SQLite or journal file is only checked (its directory exists and is writable);
    another database URL is connected to once. An RDB storage's ``$ADVISOR_STORAGE_WAIT``
    is checked too.
    """
    try:
        _check_storage(url, must_exist)
    except StudyError as exc:
        if url and os.environ.get("ADVISOR_STORAGE") == url:
            raise StudyError(f"{exc} (the storage is $ADVISOR_STORAGE's)") from None
        raise


def _check_storage(url: str, must_exist: bool) -> None:
    """Report a bad URL, an unusable path or an unreachable database, writing nothing.

    A SQLite or journal file is only checked (its directory exists and is writable);
    another database URL is connected to once. An RDB storage's ``$ADVISOR_STORAGE_WAIT``
    is checked too.
    """
    journal = _journal_path(url)
    if journal is not None:
        _check_file(journal, url, must_exist)
        return
    if "://" not in url:
        raise StudyError(f"storage {shown_url(url)!r} is not a storage URL: expected e.g. sqlite:///advisor.db, "
                         "postgresql://user@host/db, or journal:PATH")
    wait_s_from_env()  # a bad $ADVISOR_STORAGE_WAIT is bad input too: said before anything starts
    if url.startswith("sqlite:") and (not url.startswith("sqlite:///") or url.split("?")[0].endswith(":memory:")):
        raise StudyError(f"storage {url!r} is an in-memory SQLite database: each process (the driver, "
                         "its trials, a later `advisor report`) would see an empty one of its own, and the study "
                         "would be lost when the command ends; give a file, e.g. sqlite:///advisor.db")
    if url.startswith("sqlite:///") and "?" in url:  # else read as part of the file's name (x.db?mode=ro)
        raise StudyError(f"storage {url!r} has SQLite URL options ({url.split('?', 1)[1]!r}): advisor opens the file "
                         "itself (WAL mode, a write-lock check, private file modes) and takes none; give the plain "
                         f"path, e.g. {url.split('?', 1)[0]}")
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        _check_file(path, url, must_exist)
        if path.exists():
            _check_sqlite(path, url)
        return
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(url, connect_args={"connect_timeout": 10} if url.startswith("postgresql")
                                          else {})
        with engine.connect():
            pass
        engine.dispose()
    except (ImportError, sqlalchemy.exc.NoSuchModuleError) as exc:
        raise StudyError(f"storage {shown_url(url)!r} needs a database driver that is not installed "
                         f"({type(exc).__name__}: {first_line(exc)})") from None
    except Exception as exc:
        raise StudyError(f"storage {shown_url(url)!r} cannot be reached: {type(exc).__name__}: {first_line(exc)}") from None


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
            raise StudyError(f"storage {shown_url(url)!r}: {path} is locked by another process (another `advisor tune` "
                             f"writing to it?); waited {timeout_s:.0f} s") from None
        raise StudyError(f"storage {shown_url(url)!r}: {path} is not a usable SQLite database ({text})") from None


def open_storage(url: str, must_exist: bool = False, wait_s: float | None = None) -> Any:
    """Open an Optuna storage after ``check_storage``.

    ``sqlite:///path.db`` and other SQLAlchemy URLs open an RDBStorage that waits for a
    database that restarts (up to ``wait_s``, default ``$ADVISOR_STORAGE_WAIT``), and raises
    ``StorageError`` when it stays unreachable or its disk is full
    (``advisor.study.storage.guard``); a path ending in ``.log`` or ``.jsonl`` (or
    ``journal:PATH``) opens a JournalFileBackend.
    """
    check_storage(url, must_exist)
    journal = _journal_path(url)
    if journal is not None:
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(str(journal)))
    sqlite = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
    new = sqlite is not None and not sqlite.exists()
    if new:  # studies may name private paths: readable by the user only (its -wal and -shm files too,
        try:  # which SQLite makes alike)
            os.close(os.open(sqlite, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            new = False  # another driver made it meanwhile
        except OSError as exc:
            raise StudyError(f"storage {shown_url(url)!r}: {sqlite} cannot be created ({exc.strerror or exc})") from None
    try:
        # waits for a database that restarts; the driver (not must_exist) puts SQLite in WAL mode,
        # readers leave the file as they found it (advisor.study.storage.guard)
        storage = open_guarded(url, wait_s=wait_s, write_ahead=not must_exist)
    except BaseException as exc:
        if new:
            sqlite.unlink(missing_ok=True)  # type: ignore[union-attr]  # nothing half-written
        if isinstance(exc, StudyError) or not isinstance(exc, Exception):
            raise
        raise StudyError(f"storage {shown_url(url)!r} cannot be opened: {type(exc).__name__}: {first_line(exc)}") from None
    return storage


def _check_file(path: Path, url: str, must_exist: bool) -> None:
    if path.is_dir():
        raise StudyError(f"storage {shown_url(url)!r}: {path} is a directory, expected a file")
    if must_exist and not path.exists():
        raise StudyError(f"storage {shown_url(url)!r}: {path} does not exist (no study has been run there yet)")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise StudyError(f"storage {shown_url(url)!r}: directory {parent} does not exist")
    if not parent.is_dir():
        raise StudyError(f"storage {shown_url(url)!r}: {parent} is not a directory")
    if not os.access(parent if not path.exists() else path, os.W_OK):
        raise StudyError(f"storage {shown_url(url)!r}: {path if path.exists() else parent} is not writable")
    if not must_exist and not path.exists():  # tried, not asked: root passes os.access where /sys or a
        # read-only mount refuses a new file (a review met a traceback and exit 1 after the preflight); a
        # file of its own is tried, never the study's path, which another driver may be creating now
        probe = parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.probe"
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as exc:
            raise StudyError(f"storage {shown_url(url)!r}: {path} cannot be created in {parent} "
                             f"({exc.strerror or exc})") from None
        probe.unlink(missing_ok=True)


def is_advisor_study(study: Any) -> bool:
    """Whether advisor wrote ``study`` (an ``optuna.Study`` or a ``StudySummary``): its three
    objectives and its workload recorded. A storage may hold other Optuna studies too."""
    return is_advisor(study.user_attrs, len(study.directions))


def study_names(storage: Any, advisor_only: bool = False) -> list[str]:
    """The studies in ``storage``: every one, or only those advisor wrote."""
    import optuna

    return [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)
            if not advisor_only or is_advisor_study(s)]


def summary(storage: Any, name: str, wait_s: float = 0.0, on_wait: Callable[[str], None] | None = None) -> Any:
    """Optuna's summary of study ``name`` in ``storage`` (its directions and attributes, read
    in one query), or None when there is no such study. With ``wait_s``, a study another
    driver is creating right now (``being_created``) is read again until its identity is
    stored, for up to ``wait_s`` seconds: two `advisor tune` started together on one study
    would otherwise take the other's half-made study for another program's. ``on_wait`` is
    told once when it waits."""
    import optuna

    deadline, said = time.monotonic() + wait_s, False
    while True:
        found = [s for s in optuna.get_all_study_summaries(storage, include_best_trial=False) if s.study_name == name]
        if not found or not being_created(found[0].user_attrs, len(found[0].directions), found[0].n_trials) \
                or time.monotonic() >= deadline:
            return found[0] if found else None
        if on_wait is not None and not said:
            on_wait(f"study {name!r} is being created by another `advisor tune` (no identity stored yet): waiting up "
                    f"to {wait_s:.0f} s for it")
            said = True
        time.sleep(0.2)


def other_studies(storage: Any) -> list[str]:
    """The studies in ``storage`` that advisor did not write (other code's Optuna studies)."""
    import optuna

    return [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)
            if not is_advisor_study(s)]


def find_study(storage: Any, name: str | None, url: str | None = None) -> str:
    """The name of advisor's study ``name`` in ``storage``, or of its only one when ``name``
    is None. Raises StudyError when the storage holds none, the name is unknown or names
    another program's Optuna study, or several studies leave the choice open."""
    names = study_names(storage, advisor_only=True)
    where = f"storage {shown_url(url)!r}" if url else "the storage"
    if name is not None and name not in names and name in other_studies(storage):
        raise StudyError(f"study {name!r} in {where} is another program's Optuna study, not advisor's; advisor "
                         "reads only the studies `advisor tune` writes" +
                         (f" (here: {', '.join(names)})" if names else ""))
    if not names:
        others = other_studies(storage)
        also = f" advisor study yet (it holds other Optuna studies, not advisor's: {', '.join(others)})" if others \
            else " study yet"
        raise StudyError(f"{where} holds no{also}: run `advisor tune model.py` first")
    if name is None:
        if len(names) > 1:
            raise StudyError(f"the storage holds {len(names)} studies; choose one with --study ({', '.join(names)})")
        return names[0]
    if name not in names:
        raise StudyError(f"no study named {name!r} in {url or 'the storage'} (studies: {', '.join(names)})")
    return name


def load(storage: Any, name: str | None, url: str | None = None) -> optuna.Study:
    """Load a study by name; with no name, the only study in the storage."""
    import optuna

    return optuna.load_study(study_name=find_study(storage, name, url), storage=storage)
