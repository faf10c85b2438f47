"""A real PostgreSQL server for the storage tests: a throwaway cluster made by initdb in a
temp directory, listening on 127.0.0.1 (a free port) and on a unix socket in that
directory, owned by the test session and removed after it. As root it runs as the
``postgres`` user (initdb refuses root). Tests that use it skip, saying why, only where
the PostgreSQL server binaries or the Python driver (psycopg) are absent.

    from pg_server import pg_database, pg_server  # noqa: F401  (fixtures)
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest


def _bindir() -> Path | None:
    found = shutil.which("pg_config")
    if found:
        out = subprocess.run([found, "--bindir"], check=False, capture_output=True, text=True).stdout.strip()
        if out and (Path(out) / "initdb").exists():
            return Path(out)
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(Path(d).parent.name), reverse=True)
    return next((Path(d) for d in dirs if (Path(d) / "initdb").exists()), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One cluster: ``start``, ``stop`` and ``restart`` it; ``create_database`` gives a
    fresh database's URL."""

    def __init__(self, bindir: Path, user: str | None) -> None:
        self.bindir, self.user = bindir, user
        self.dir = Path(tempfile.mkdtemp(prefix="advpg-"))  # short: the unix socket lives here
        self.data, self.log = self.dir / "data", self.dir / "server.log"
        self.port = _free_port()
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        command = [str(self.bindir / argv[0]), *argv[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr or done.stdout}"
                               f"\n{self.log.read_text() if self.log.exists() else ''}")
        return done

    def init(self) -> PgServer:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "advisor", "-E", "UTF8", "--no-sync")
        return self

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o",
                  # fsync off: a crash of the server (pg_ctl -m immediate) keeps every acknowledged
                  # commit, in the OS's cache; synchronous_commit stays on, or it would not
                  f"-k {self.dir} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-m", mode, "stop")

    def restart(self, down_s: float = 0.0, mode: str = "fast") -> None:
        """Stop (closing every connection), stay down ``down_s`` seconds, start again."""
        self.stop(mode)
        time.sleep(down_s)
        self.start()

    @property
    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def create_database(self) -> str:
        name = "t" + uuid.uuid4().hex[:10]
        self._run("createdb", "-h", str(self.dir), "-p", str(self.port), "-U", "advisor", name)
        return self.url(name)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://advisor@127.0.0.1:{self.port}/{database}"

    def remove(self) -> None:
        if self.data.exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop", check=False)
        for _ in range(10):  # the server's last processes may still be writing as it goes
            shutil.rmtree(self.dir, ignore_errors=True)
            if not self.dir.exists():
                break
            time.sleep(0.3)


def read_trials(url: str, study_name: str) -> list:
    """The study's trials, read through an engine closed at once. A test that polls a study
    several times a second must not leave each poll's pool to the garbage collector: on a
    loaded machine those pools filled the server's 100 connections ("too many clients").
    Raises as ``optuna.load_study`` does (KeyError: no such study yet)."""
    import optuna

    storage = optuna.storages.RDBStorage(url)
    try:
        return optuna.load_study(study_name=study_name, storage=storage).get_trials()
    finally:
        storage.engine.dispose()


@pytest.fixture(scope="session")
def pg_server():
    """The session's PostgreSQL server (started once: ~1.5 s)."""
    bindir = _bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed: apt-get install postgresql")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("the PostgreSQL driver is not installed: pip install -e '.[postgresql]'")
    user = None
    if os.geteuid() == 0:  # initdb refuses to run as root
        try:
            user = pwd.getpwnam("postgres").pw_name
        except KeyError:
            pytest.skip("running as root and no 'postgres' user to run the server as")
    server = PgServer(bindir, user)
    try:
        server.init().start()
        yield server
    finally:
        server.remove()


@pytest.fixture
def pg_database(pg_server):
    """A fresh database on the session's server (running again if a test stopped it)."""
    if not pg_server.running:
        pg_server.start()
    return pg_server.create_database()
