"""A study's RDB storage that rides out a database restart and says clearly when it cannot.

Every call the driver (through Optuna) makes on the storage runs here. A call that fails
because the database cannot be reached (SQLAlchemy's ``OperationalError`` /
``InterfaceError``: connection refused or dropped, the server shutting down or starting
up, a SQLite file locked) is tried again, with a backoff from 0.1 s to 5 s, for up to
``wait_s`` seconds (``$ADVISOR_STORAGE_WAIT``, default 60); pooled connections are pinged
before use, so the first call after a restart reconnects by itself. A full disk is not
waited for. When the storage cannot serve the study, ``StorageError`` says which storage,
what failed and how to resume; from then on each call is tried once, so stopping the study
(cancelling running trials) does not wait again.

Retrying a write whose commit went through but whose answer was lost must not write twice:

- attributes, parameters and intermediate values are upserts (or an insert whose
  duplicate Optuna ignores): trying again is harmless;
- a new trial carries a token (system attribute ``TOKEN``) written in the same
  transaction as the trial; before creating it again, the trials of the study are searched
  for the token, so a lost answer never creates a second trial;
- finishing a trial (``set_trial_state_values``) again finds it finished: when it holds the
  state and values being written, that is success, not ``UpdateFinishedTrialError``;
- creating a study again finds it created (``DuplicatedStudyError``): its id is returned;
- taking a WAITING trial (an enqueued configuration) is left as Optuna does it: tried
  again, it finds the trial RUNNING and reports it taken, so the configuration is not run
  twice; at worst a trial is left RUNNING, which the next driver on the study fails as
  stale (``advisor.study.run._trial_writes.fail_stale``).
"""

from __future__ import annotations

import functools
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from advisor.core.errors import StorageError, StudyError
from advisor.core.units import first_line

if TYPE_CHECKING:
    import optuna

T = TypeVar("T")
WAIT_S = 60.0
TOKEN = "advisor:create_token"  # trial system attribute: which create_new_trial call made it
_FIRST_DELAY_S, _MAX_DELAY_S = 0.1, 5.0
_FULL = ("database or disk is full", "no space left on device", "could not extend file", "disk full")
_inside = threading.local()  # a guarded call in progress on this thread: calls it makes are not retried again


def wait_s_from_env() -> float:
    """``$ADVISOR_STORAGE_WAIT`` (seconds, >= 0), else 60."""
    text = os.environ.get("ADVISOR_STORAGE_WAIT", "").strip()
    if not text:
        return WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise StudyError(f"$ADVISOR_STORAGE_WAIT is {text!r}, expected the seconds to wait for an unreachable "
                         "storage (a number >= 0; default 60)")
    return value


def shown_url(url: str) -> str:
    """The URL without its password, for messages."""
    import sqlalchemy.exc
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        return url


def fault(exc: BaseException) -> str | None:
    """'full' (no space left for the database), 'unreachable' (the connection failed or
    broke: worth trying again), or None (not a storage fault: raised as it is)."""
    import sqlalchemy.exc

    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen and len(seen) < 8:
        seen.append(e)
        e = e.__cause__ or e.__context__
    text = " ".join(str(e) for e in seen).lower()
    if any(isinstance(e, sqlalchemy.exc.DBAPIError) or type(e).__name__ == "DiskFull" for e in seen) \
            and any(s in text for s in _FULL):
        return "full"
    for e in seen:
        if isinstance(e, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)) or (
                isinstance(e, sqlalchemy.exc.DBAPIError) and e.connection_invalidated):
            return "unreachable"
    return None


def _sqlite_full(url: str) -> bool:
    """A SQLite file whose file system has (almost) no space left."""
    if not url.startswith("sqlite:///"):
        return False
    import shutil
    from pathlib import Path

    try:
        return shutil.disk_usage(Path(url.removeprefix("sqlite:///")).resolve().parent).free < 64 * 1024
    except OSError:
        return False


def _where(url: str) -> str:
    """For SQLite: the file and the space left beside it."""
    if not url.startswith("sqlite:///"):
        return ""
    import shutil
    from pathlib import Path

    path = Path(url.removeprefix("sqlite:///")).resolve()
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        return f" ({path})"
    return f" ({path}; {free / 2**20:.1f} MiB free on its file system)"


@functools.cache
def _storage_class() -> type:
    """The RDBStorage subclass (built on first use: optuna is imported only when needed)."""
    import optuna
    from optuna.storages import RDBStorage
    from optuna.trial import FrozenTrial, TrialState

    class GuardedRDBStorage(RDBStorage):  # type: ignore[misc]
        """RDBStorage whose calls wait for an unreachable database (see the module's doc)."""

        def __init__(self, url: str, wait_s: float = WAIT_S, engine_kwargs: dict[str, Any] | None = None) -> None:
            self.wait_s = wait_s
            self.lost: StorageError | None = None
            self.notify: Callable[[str], None] | None = None  # told when a wait starts and ends
            self._notify_thread: int | None = None
            super().__init__(url, engine_kwargs=engine_kwargs)

        def __getstate__(self) -> dict[Any, Any]:
            state = super().__getstate__()
            state["notify"] = None
            return state

        def watch(self, notify: Callable[[str], None]) -> None:
            """Call ``notify(text)`` when a call made on this thread starts and stops waiting."""
            self.notify, self._notify_thread = notify, threading.get_ident()

        def _say(self, text: str) -> None:
            if self.notify is not None and threading.get_ident() == self._notify_thread:
                self.notify(text)

        def _guarded(self, what: str, attempt: Callable[[int], T]) -> T:
            """``attempt(n)`` (n: how many attempts failed before) until it succeeds, is
            not a storage fault, or the storage is lost."""
            if getattr(_inside, "active", False):
                return attempt(0)
            _inside.active = True
            try:
                return self._retry(what, attempt)
            finally:
                _inside.active = False

        def _retry(self, what: str, attempt: Callable[[int], T]) -> T:
            started = time.monotonic()
            delay, failures = _FIRST_DELAY_S, 0
            while True:
                try:
                    result = attempt(failures)
                except Exception as exc:
                    kind = fault(exc)
                    if kind is None:
                        raise
                    if kind == "unreachable" and _sqlite_full(self.url):  # e.g. no room for its journal
                        kind = "full"
                    if self.lost is not None:  # lost already: the study is stopping
                        raise self.lost from None
                    waited = time.monotonic() - started
                    if kind == "full" or waited >= self.wait_s:
                        self.lost = self._error(kind, exc, waited)
                        raise self.lost from None
                    if failures == 0:
                        self._say(f"storage {shown_url(self.url)} is not answering ({_reason(exc)}): "
                                  f"waiting up to {_secs(self.wait_s)} for it")
                    try:
                        time.sleep(min(delay, self.wait_s - waited + 0.01))
                    except KeyboardInterrupt:  # Ctrl-C while waiting: stopping must not wait again
                        self.lost = self._error(kind, exc, waited)
                        raise
                    delay, failures = min(2 * delay, _MAX_DELAY_S), failures + 1
                    continue
                if failures:
                    self._say(f"storage {shown_url(self.url)} is back after {_secs(time.monotonic() - started)} "
                              f"({failures} attempts of {what}); the study goes on")
                return result

        def _error(self, kind: str, exc: BaseException, waited: float) -> StorageError:
            url = shown_url(self.url)
            if kind == "full":
                why = f"the disk holding it is full{_where(self.url)}: {_reason(exc)}"
                fix = "free space there, then run the same command again to resume the study"
            else:
                why = f"it did not answer for {_secs(waited)} ({_reason(exc)})"
                fix = ("once the database is reachable again, run the same command to resume the study "
                       "($ADVISOR_STORAGE_WAIT sets how long to wait)")
            return StorageError(f"storage {url} is lost: {why}. The study stopped (running trials cancelled, "
                                f"stored trials kept); {fix}")

        # ---- the calls with a rule of their own (see the module's doc) --------------------
        def create_new_study(self, directions: Any, study_name: str | None = None) -> int:
            def attempt(failures: int) -> int:
                try:
                    return RDBStorage.create_new_study(self, directions, study_name)
                except optuna.exceptions.DuplicatedStudyError:
                    if failures and study_name is not None:
                        return RDBStorage.get_study_id_from_name(self, study_name)
                    raise

            return self._guarded("create_new_study", attempt)

        def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
            token = uuid.uuid4().hex
            if template_trial is None:
                from datetime import datetime

                template = FrozenTrial(number=-1, state=TrialState.RUNNING, value=None, values=None,
                                       datetime_start=datetime.now(), datetime_complete=None, params={},
                                       distributions={}, user_attrs={}, system_attrs={TOKEN: token},
                                       intermediate_values={}, trial_id=-1)
            else:
                import copy

                template = copy.deepcopy(template_trial)
                template.system_attrs = {**template.system_attrs, TOKEN: token}

            def attempt(failures: int) -> FrozenTrial:
                if failures:
                    made = [t for t in RDBStorage.get_all_trials(self, study_id, deepcopy=False)
                            if t.system_attrs.get(TOKEN) == token]
                    if made:  # the earlier attempt went through; its answer was lost
                        return made[0]
                return self._create_once(study_id, template)

            return self._guarded("create_new_trial", attempt)

        def _create_once(self, study_id: int, template: FrozenTrial) -> FrozenTrial:
            """Optuna's ``_create_new_trial`` without its own retries (each of which could
            write a second trial): one transaction, the trial and its token together."""
            import copy

            from optuna.storages._rdb import models
            from optuna.storages._rdb.storage import _create_scoped_session

            with _create_scoped_session(self.scoped_session) as session:
                models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
                trial = self._get_prepared_new_trial(study_id, template, session)
                frozen = copy.deepcopy(template)
                frozen.number = trial.number  # type: ignore[assignment]
                frozen.datetime_start = trial.datetime_start  # type: ignore[assignment]
                frozen._trial_id = trial.trial_id  # type: ignore[assignment]
                return frozen

        def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
            return self._create_new_trial(study_id, template_trial)._trial_id

        def set_trial_state_values(self, trial_id: int, state: TrialState, values: Any = None) -> bool:
            def attempt(failures: int) -> bool:
                try:
                    return RDBStorage.set_trial_state_values(self, trial_id, state, values)
                except optuna.exceptions.UpdateFinishedTrialError:
                    if failures and state.is_finished():
                        stored = RDBStorage.get_trial(self, trial_id)
                        if stored.state == state and (values is None or list(stored.values or ()) == list(values)):
                            return True  # the earlier attempt went through; its answer was lost
                    raise

            return self._guarded("set_trial_state_values", attempt)

    def guard(name: str) -> Callable[..., Any]:
        @functools.wraps(getattr(RDBStorage, name))
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            return self._guarded(name, lambda failures: getattr(RDBStorage, name)(self, *args, **kwargs))

        return call

    for name in ("delete_study", "set_study_user_attr", "set_study_system_attr", "get_study_id_from_name",
                 "get_study_name_from_id", "get_study_directions", "get_study_user_attrs", "get_study_system_attrs",
                 "get_all_studies", "set_trial_param", "_set_trial_param", "get_trial_param",
                 "set_trial_intermediate_value", "set_trial_user_attr", "set_trial_system_attr",
                 "get_trial_user_attrs", "get_trial_system_attrs", "get_trial_id_from_study_id_trial_number",
                 "get_trial", "get_all_trials", "_get_trials", "get_best_trial", "_get_best_trial_id",
                 "record_heartbeat", "_get_stale_trial_ids", "get_n_trials"):
        setattr(GuardedRDBStorage, name, guard(name))
    return GuardedRDBStorage


def _secs(s: float) -> str:
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def _reason(exc: BaseException) -> str:
    """The database driver's own words: its error's type and first line."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {first_line(exc)}"


SCHEMA_TRIES = 3  # opening a new database while another process creates Optuna's tables in it


def schema_race(exc: BaseException) -> bool:
    """Whether ``exc`` is two processes creating Optuna's tables in a new database at once
    (two drivers started together on one PostgreSQL study): the second's CREATE TABLE fails
    on what the first just made ('duplicate key value violates unique constraint
    "pg_type_typname_nsp_index"', 'relation ... already exists'); opening it again finds
    the tables made."""
    text = str(exc)
    return type(exc).__name__ in ("IntegrityError", "ProgrammingError", "OperationalError") and (
        "pg_type_typname_nsp_index" in text or "already exists" in text)


def open_guarded(url: str, wait_s: float | None = None, write_ahead: bool = False) -> optuna.storages.RDBStorage:
    """An RDBStorage on ``url`` whose calls wait up to ``wait_s`` (default
    ``$ADVISOR_STORAGE_WAIT`` or 60 s) for an unreachable database, then raise
    ``StorageError``. Connections are pinged before use; a PostgreSQL connection attempt
    gives up after 10 s (each one is tried again within the wait). ``write_ahead``: a
    SQLite file is switched to write-ahead logging (``_write_ahead``; the study's driver)."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 30}
    else:
        kwargs["pool_pre_ping"] = True
        if url.startswith("postgresql"):
            kwargs["connect_args"] = {"connect_timeout": 10}
    make = _storage_class()
    for attempt in range(SCHEMA_TRIES):
        try:
            storage = make(url, wait_s=wait_s_from_env() if wait_s is None else wait_s, engine_kwargs=kwargs)
            break
        except Exception as exc:  # noqa: BLE001 - only the schema race is tried again
            if attempt == SCHEMA_TRIES - 1 or not schema_race(exc):
                raise
            time.sleep(0.5 * (attempt + 1))
    if write_ahead and url.startswith("sqlite"):
        _write_ahead(storage.engine)
    return storage


def _write_ahead(engine: Any) -> None:
    """SQLite in write-ahead-log mode with ``synchronous=NORMAL``: a commit no longer waits
    for the disk (each stored attribute is a commit: ~18 ms -> ~1 ms here, see
    benchmarks/long_study.py). A crashed process loses nothing it committed; a power cut at
    most the latest commits, never the database's consistency (SQLite's documentation on
    WAL). Other processes on the same machine read and write it as before (not over NFS,
    where SQLite was never safe)."""
    import sqlalchemy

    def on_connect(dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    sqlalchemy.event.listen(engine, "connect", on_connect)
    engine.dispose()  # the connections Optuna opened to set up its tables: new ones get the pragmas


def fold_log(storage: Any) -> None:
    """At the end of a study: a SQLite file's write-ahead log folded into the database file
    (a copy of that file alone then holds the whole study); for every database, the pool's
    connections closed (new ones open on the next use): a program that runs study after
    study (``advisor.tune()`` in a notebook) holds no idle connections to a database server."""
    engine = getattr(storage, "engine", None)
    if engine is None:  # a journal file: nothing pooled
        return
    if engine.url.get_backend_name() == "sqlite":
        import sqlalchemy

        try:
            with engine.connect() as connection:
                connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlalchemy.exc.SQLAlchemyError:  # busy with another process's readers: folded when they close
            pass
    engine.dispose()
