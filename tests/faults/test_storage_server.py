"""A study on a real PostgreSQL server (tests/pg_server.py: a throwaway cluster on
127.0.0.1), end to end, while the server restarts. A restart shorter than the wait is ridden out: the
driver says it waits, reconnects and the study goes on (the server stays down until the
driver has said it waits, then comes back well within the wait: nothing races the driver's
pace on a slow machine). An outage longer than the wait ($ADVISOR_STORAGE_WAIT) stops the
study with a clear message (exit status 1, running trials cancelled); once the server is
back, the same command resumes the study, which reaches its total with every
configuration measured once and no trial created twice; `advisor export` reads it there."""

from __future__ import annotations

import io
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import optuna
import pytest

from advisor.cli.main import main
from advisor.study.run._drivers import GRACE_S
from advisor.study.storage.guard import TOKEN

from conftest import EXAMPLES
from peek import peek_trials
from pg_server import pg_database, pg_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.ray

STUDY = "digits_mlp-bs"
SPACE = "batch_size: {choices: [16, 32, 64, 128]}\nthreads: {choices: [1, 2]}\n"
# $ADVISOR_STORAGE_WAIT: how long the driver waits for the server. The restart takes ~1.5 s of it (its
# tries, 0.1 s apart doubling, find it back at 1.5 s or 3.1 s; the last one is at the wait's end)
WAIT_S = 6
DOWN_S = 1.0  # how long the restart keeps the server down once the driver waits: a few of its tries fail


class _Output(io.StringIO):
    """sys.stdout or sys.stderr of the driver, run in this process: ``wait_for`` a line as
    it comes (written by the driver's thread, waited for by the test's)."""

    def __init__(self) -> None:
        super().__init__()
        self.closed_for_test, self._grew = False, threading.Condition()

    def write(self, text: str) -> int:
        with self._grew:
            written = super().write(text)
            self._grew.notify_all()
        return written

    @property
    def text(self) -> str:
        with self._grew:
            return self.getvalue()

    def close_for_test(self) -> None:
        """The driver has returned: ``wait_for`` stops waiting."""
        with self._grew:
            self.closed_for_test = True
            self._grew.notify_all()

    def wait_for(self, text: str, timeout: float, start: int = 0) -> bool:
        """Whether ``text`` appears after ``start`` (a length of ``self.text``) within
        ``timeout`` seconds (False at once when the driver has returned without it)."""
        with self._grew:
            return self._grew.wait_for(lambda: text in self.getvalue()[start:] or self.closed_for_test, timeout) \
                and text in self.getvalue()[start:]


def _args(space, url: str, trials: int) -> list[str]:
    return ["tune", str(EXAMPLES / "digits_mlp.py"), "--space", str(space), "--train-samples", "300",
            "--storage", url, "--trials", str(trials), "--no-tui"]


def _finished(url: str) -> int:
    """Trials stored as complete or pruned (0 while the server or the study is not there);
    polled 5 times a second."""
    return sum(t.state.name in ("COMPLETE", "PRUNED") for t in peek_trials(url, STUDY))


def _restart_then_outage(pg_server, url: str, out: _Output, returned: threading.Event,  # noqa: F811
                         events: list, problems: list) -> None:
    """What the test does to the server while the driver runs (in the main thread): a
    restart shorter than the wait once a trial is stored, an outage longer than it once a
    second one is. A check that fails goes into ``problems``; the server is left running
    only if the outage was not reached."""

    def check(ok: bool, why: str) -> bool:
        if not ok:
            problems.append(why)
        return ok

    deadline = time.monotonic() + 240
    while _finished(url) < 1 and not returned.is_set() and time.monotonic() < deadline:
        time.sleep(0.2)
    if not check(_finished(url) >= 1 and not returned.is_set(), "no trial stored before the restart"):
        return
    # the restart: down until the driver has asked the storage and said it waits (it renews its
    # heartbeat every drivers.BEAT_S whatever its trials are doing; GRACE_S is when the study's other
    # drivers would take it for gone), then up again well within the wait: ridden out
    start = len(out.text)
    pg_server.stop()
    down_at = time.monotonic()
    noticed = out.wait_for("is not answering", timeout=GRACE_S, start=start)
    events.append(("noticed", round(time.monotonic() - down_at, 1)))
    if noticed:
        time.sleep(DOWN_S)
    pg_server.start()
    events.append(("restarted", round(time.monotonic() - down_at, 1)))
    if not check(noticed, "the driver did not notice the server down"):
        return
    # its next try within the wait finds it back (tries are at most 5 s apart)
    if not check(out.wait_for("is back after", timeout=WAIT_S + 30, start=start),
                 "the driver did not get the server back"):
        return
    events.append(("back", round(time.monotonic() - down_at, 1)))
    while _finished(url) < 2 and not returned.is_set() and time.monotonic() < deadline:
        time.sleep(0.2)
    if not check(not returned.is_set(), "the study ended before the outage"):
        return
    pg_server.stop()  # longer than the wait: the study stops
    events.append(("outage", time.monotonic()))


@pytest.mark.timeout(420)
def test_a_study_on_postgresql_rides_out_a_restart_stops_on_an_outage_and_resumes(
        ray_session, pg_server, pg_database, workdir, capsys, monkeypatch, quiet_optuna):  # noqa: F811
    """The driver runs in this process (on the session's Ray), in the main thread as the
    command's does; the test's thread restarts and stops the server meanwhile, watching
    what the driver prints."""
    url = pg_database
    space = workdir / "bs.yaml"
    space.write_text(SPACE)
    args = _args(space, url, trials=5)
    monkeypatch.setenv("ADVISOR_STORAGE_WAIT", str(WAIT_S))
    out, err = _Output(), _Output()
    events: list[tuple[str, object]] = []
    problems: list[str] = []
    returned = threading.Event()
    server = threading.Thread(target=_restart_then_outage, args=(pg_server, url, out, returned, events, problems),
                              daemon=True)
    stdout_before, stderr_before = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        server.start()
        code = main(args)
        returned.set()
        events.append(("exited", round(time.monotonic() - dict(events).get("outage", time.monotonic()), 1)))
    finally:
        sys.stdout, sys.stderr = stdout_before, stderr_before
        returned.set()
        out.close_for_test()
        err.close_for_test()
        server.join(timeout=60)
        if not pg_server.running:
            pg_server.start()
    captured = capsys.readouterr()  # what reached the streams the driver started with (a logger's handler)
    stdout, stderr = out.text + captured.out, err.text + captured.err

    def seen() -> tuple:
        return events, stdout[-3000:], stderr[-3000:]

    assert not problems, (problems, *seen())
    assert not server.is_alive(), seen()
    assert code == 1, seen()
    assert "is not answering" in stdout and "is back after" in stdout, stdout[-3000:]  # the restart, ridden out
    assert "advisor tune: error: storage postgresql+psycopg://advisor@127.0.0.1" in stderr, stderr[-3000:]
    assert "did not answer for" in stderr and "run the same command to resume" in stderr
    assert "Traceback" not in stderr
    assert events[-1][1] < WAIT_S + 30, events  # stopped within the wait

    before = optuna.load_study(study_name=STUDY, storage=url).trials
    done_before = {t.number: t.values for t in before if t.state.name in ("COMPLETE", "PRUNED")}
    assert len(done_before) >= 2

    assert main(args) == 0  # the same command, once the server is back
    resumed = capsys.readouterr().out
    after = optuna.load_study(study_name=STUDY, storage=url).trials
    for number, values in done_before.items():  # nothing lost, nothing measured again
        assert after[number].values == values
    assert not [t for t in after if t.state.name == "RUNNING"], resumed
    measured = [t for t in after if t.state.name in ("COMPLETE", "PRUNED") and "duplicate_of" not in t.user_attrs]
    keys = [t.user_attrs["config_key"] for t in measured]
    assert len(keys) == len(set(keys)) == 5, [(t.number, t.state.name, t.user_attrs.get("failure_class"))
                                              for t in after]
    assert sum(1 for t in after if t.user_attrs.get("baseline")) == 1
    tokens = [t.system_attrs[TOKEN] for t in after if TOKEN in t.system_attrs]
    assert len(tokens) == len(after) == len(set(tokens))  # every trial created once
    for t in after:  # a trial stopped by the outage is failed and not counted; its configuration ran again
        if t.state.name == "FAIL":
            assert t.user_attrs.get("failure_class") in ("interrupted", "cancelled"), t.user_attrs
    assert f"stored: study '{STUDY}' in {url}" in resumed
    assert main(["export", "--storage", url, "--study", STUDY, "-o", "best.yaml"]) == 0  # other commands read it
    assert "batch_size" in (workdir / "best.yaml").read_text()



def _restarts_under_load(server, url: str, restarts: int) -> tuple[int, list]:
    """A writer asks, tags and tells trials as fast as it can while the server is stopped
    (by turns cleanly and by crash, `pg_ctl -m immediate`, so that some stops fall inside a
    commit) and started again ``restarts`` times; the writer's trials, and the stored ones."""
    import random

    from advisor.study.storage.stores import open_storage

    storage = open_storage(url)
    study = optuna.create_study(study_name="load", storage=storage, directions=["maximize"])
    told: dict[int, float] = {}
    stop, errors = threading.Event(), []

    def writer() -> None:
        try:
            while not stop.is_set():
                trial = study.ask()
                trial.set_user_attr("writer", True)
                study.tell(trial, [float(trial.number)])
                told[trial.number] = float(trial.number)
        except Exception as exc:  # noqa: BLE001  (reported by the test)
            import traceback

            errors.append("".join(traceback.format_exception(exc)))

    thread = threading.Thread(target=writer)
    thread.start()
    rng = random.Random(0)
    try:
        for i in range(restarts):
            time.sleep(rng.uniform(0.2, 0.6))
            server.restart(down_s=rng.uniform(0.0, 0.5), mode="immediate" if i % 2 else "fast")
        after_last = len(told)
        deadline = time.monotonic() + 60
        while len(told) < after_last + 3 and time.monotonic() < deadline and not errors:
            time.sleep(0.1)  # the writer goes on after the last restart
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not errors, errors[0]
    assert len(told) >= after_last + 3, "the writer stopped after the last restart"
    return len(told), optuna.load_study(study_name="load", storage=url).trials


@pytest.mark.timeout(180)
def test_restarts_under_load_lose_and_duplicate_nothing(pg_server, pg_database, quiet_optuna):  # noqa: F811
    count, stored = _restarts_under_load(pg_server, pg_database, restarts=6)
    assert len(stored) == count  # no trial created twice, none lost
    assert [t.number for t in stored] == list(range(count))
    assert all(t.state.name == "COMPLETE" and t.values == [float(t.number)] and t.user_attrs == {"writer": True}
               for t in stored), [(t.number, t.state.name) for t in stored if t.state.name != "COMPLETE"]
    tokens = [t.system_attrs[TOKEN] for t in stored]
    assert len(set(tokens)) == count


def test_a_finished_study_holds_no_idle_connections_to_the_server(pg_server, pg_database, quiet_optuna):  # noqa: F811
    """The driver's pool is closed at the study's end (``fold_log``): a program that runs
    study after study holds no idle connections (the server's backends, counted by the
    server itself)."""
    from advisor.study.storage.guard import fold_log
    from advisor.study.storage.stores import open_storage

    def backends() -> int:
        check = optuna.storages.RDBStorage(pg_database)
        try:
            with check.engine.connect() as connection:
                return connection.exec_driver_sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid()").scalar()
        finally:
            check.engine.dispose()

    before = backends()  # (Optuna's first setup of the tables leaves a connection of its own)
    storage = open_storage(pg_database)
    study = optuna.create_study(study_name="pool", storage=storage)
    for _ in range(3):
        study.tell(study.ask(), 1.0)
    assert backends() > before  # the study's idle connection(s), pooled
    fold_log(storage)
    # a backend leaves pg_stat_activity once its server process has exited, a moment after the
    # client closed the connection (a fresh clone's run under load still counted it at once)
    deadline = time.monotonic() + 10
    while backends() != before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert backends() == before
    assert len(optuna.load_study(study_name="pool", storage=storage).trials) == 3  # opened again on the next use


OPEN_AT_ONCE = """
import os, sys, time
from pathlib import Path
from advisor.study.storage.stores import open_storage
folder, urls = Path(sys.argv[1]), sys.argv[2:]
for round_, url in enumerate(urls):  # each round: all start together on a new database
    (folder / f"ready{round_}-{os.getpid()}").touch()
    while not (folder / f"go{round_}").exists():
        time.sleep(0.005)
    open_storage(url)
"""


def test_drivers_opening_a_new_database_at_once_all_open_it(pg_server, quiet_optuna):  # noqa: F811
    """Two drivers started together on a new PostgreSQL database both create Optuna's tables;
    the one that loses the race (a duplicate pg_type row, a relation that already exists)
    opens it again and finds them, instead of exiting with the server's error. Three rounds,
    each on a new database, of the same four processes (Python starts once in each)."""
    urls = [pg_server.create_database() for _ in range(3)]
    folder = Path(tempfile.mkdtemp())
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_AT_ONCE, str(folder), *urls], stderr=subprocess.PIPE,
                              text=True) for _ in range(4)]
    try:
        for round_ in range(len(urls)):
            deadline = time.monotonic() + 120  # until every process waits for the round (or one has exited)
            while len(list(folder.glob(f"ready{round_}-*"))) < len(procs) and time.monotonic() < deadline \
                    and all(p.poll() is None for p in procs):
                time.sleep(0.01)
            (folder / f"go{round_}").touch()
        errors = [p.communicate(timeout=120)[1] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0] * len(procs), [e[-1500:] for e in errors if e]
