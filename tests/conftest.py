"""Shared fixtures: one real local Ray instance per test session, with its state in a temp dir."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest

# Two tests at a time (README command 2 runs pytest-xdist's `-n 2` on this 2-core machine)
# put two trials' OpenMP pools on the same cores. Their spinning waits (libgomp's default
# is to spin before sleeping) then burn the time the other test's threads need (two test
# files under -n 2: 106 s spinning, 85 s sleeping). Set before torch is imported here, and
# inherited by every process the tests start (Ray, fork servers, trials, drivers). It
# changes no result a test checks; the product leaves OpenMP to the user's environment.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
WORKLOADS = Path(__file__).resolve().parent / "workloads"


@pytest.fixture(scope="session")
def ray_session():
    """A real local Ray instance shared by every test that schedules trials.

    Its temp state and auth token live in a throw-away directory, not in ~ or /tmp/ray.
    """
    import ray

    from advisor.runner import leftovers
    from advisor.runner.ray_executor import RayExecutor

    state = Path(tempfile.mkdtemp(prefix="advr-"))  # short: Ray puts unix sockets there
    executor = RayExecutor("cpu", state_dir=state)
    executor.start()
    yield ray
    executor.shutdown()  # Ray, and the temp folders its workers' fork servers leave (runner/leftovers.py)
    # a worker still exiting after the product's 3 s keeps its pymp-* folder for the next sweep, which reads
    # the notes in this folder: the last sweep of a test session waits longer, as the folder goes with it
    leftovers.sweep(executor.started_dir, wait_s=30.0)
    shutil.rmtree(state, ignore_errors=True)
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)


QUICK = {"ADVISOR_CONFIRM": "0", "ADVISOR_METRIC_SEEDS": "1", "ADVISOR_TIMING_TOLERANCE": "0.25"}


@pytest.fixture(autouse=True)
def no_confirmation_by_default(monkeypatch):
    """`advisor tune` in tests skips paired confirmation and the seed replicas (each would
    add tens of seconds to every study) and times each configuration to +-25% (a probe then
    takes its 6 blocks, about 0.3 s, not up to 0.75 s); the tests of those turn them back
    on explicitly."""
    for variable, value in QUICK.items():
        monkeypatch.setenv(variable, value)


@pytest.fixture(autouse=True)
def own_advisor_home(tmp_path_factory, monkeypatch):
    """advisor's per-user state (`advisor doctor`'s verdicts) in a throw-away directory: a
    developer's own verdicts must not change the spaces tests plan."""
    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path_factory.mktemp("advisor-home")))


@pytest.fixture(autouse=True)
def piped_width(monkeypatch):
    """Printed tables as on a pipe, whatever COLUMNS says: a COLUMNS in the environment (a
    developer's shell, pytest-xdist's workers) laid the `advisor studies` / `trials`
    tables out narrower and split the cells tests read. (Under `pytest -s` in a terminal,
    its own width still applies.) The tests of narrow and wide consoles set their own."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Run in a fresh directory so the default ./advisor.db lands there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ADVISOR_STORAGE", raising=False)
    return tmp_path


def skip_without(module: str, reason: str | None = None) -> None:
    """At a test module's top: skip the module when ``module`` is not installed, without
    importing it (``pytest.importorskip`` imports it while each xdist worker collects every
    module: lightning alone took ~2 s of each worker's start)."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(reason or f"{module} is not installed", allow_module_level=True)


def exit_status(argv: list[str]) -> int:
    """`advisor ARGV`'s exit status (argparse itself exits with 2 on a value it cannot parse)."""
    from advisor.cli.main import main

    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def run_as_trial(payload):
    """``payload`` measured in a trial process forked from the warm fork server, as a study's
    trial is (``advisor.trial.forkserver.run_forked``: the server starts once per pytest
    worker). A data-parallel trial's ranks then fork from it too; run by ``run_trial`` in
    pytest's own process, each rank is a fresh interpreter importing torch (about 1.5 s of CPU
    each here). The fresh-interpreter ranks are tested on their own
    (``test_hung_ranks_die_with_a_killed_trial``). Only the environment reaches the trial,
    not a monkeypatched attribute."""
    from advisor.trial.forkserver import run_forked

    return run_forked(payload)


def write_model(tmp_path: Path, body: str, name: str = "model.py") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def digits_mlp_at_batch_256(where: Path) -> Path:
    """examples/digits_mlp.py with a baseline batch of 256, written into ``where``. From
    there an eighth of the batch and four micro-batches each save memory far beyond the
    noise on any machine at any load: a study whose seeds hold them always has front
    candidates to confirm (with the quick space a loaded machine once left the baseline
    alone on the front, and nothing was confirmed)."""
    model = where / "digits_mlp_256.py"
    model.write_text((EXAMPLES / "digits_mlp.py").read_text().replace('BASELINE = {"batch_size": 32}',
                                                                     'BASELINE = {"batch_size": 256}'))
    return model


@pytest.fixture
def quiet_optuna():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


sys.path.insert(0, str(Path(__file__).resolve().parent))


def kill_processes_of(state_dir: str) -> None:
    """End every process whose command line names ``state_dir``: a killed driver's embedded
    Ray (raylet, GCS, workers) outlives it; its ADVISOR_RAY_DIR names them."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if state_dir.encode() in fh.read():
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def torchrun_env(folder: Path) -> dict[str, str]:
    """The environment for torchrun in a test: its temp folder in ``folder`` (torchrun leaves a
    torchelastic_* folder behind in the temp folder at every run)."""
    return {**os.environ, "TMPDIR": str(folder)}


def private_ray(prefix: str, base: dict[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """A short temp folder for a subprocess's own embedded Ray, and the subprocess's
    environment (``base``, or this one's): ADVISOR_RAY_DIR and TMPDIR there (its workers'
    temp files go with it), not the session's Ray token. End it with ``end_private_ray``."""
    state = tempfile.mkdtemp(prefix=prefix)  # short: Ray's unix sockets live there
    env = {k: v for k, v in (os.environ if base is None else base).items() if k != "RAY_AUTH_TOKEN_PATH"}
    return state, env | {"ADVISOR_RAY_DIR": state, "TMPDIR": state}


def end_private_ray(state_dir: str) -> None:
    """End a subprocess's own embedded Ray (``kill_processes_of``) and remove its folder
    (its logs and sockets, about 15 MB; its workers' temp files, ``private_ray``'s TMPDIR): a
    test leaves nothing in the temp folder."""
    kill_processes_of(state_dir)
    shutil.rmtree(state_dir, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """The longest files first (their seconds in the last whole-suite run, tests/file_seconds.py),
    each file's tests together and in their own order; files not listed after them, those that
    run studies on the session's Ray (a test uses `ray_session`) first. Under README command 2's
    `-n 2 --dist worksteal` the run then ends on short tests, not on one worker still in a long
    study (a file whose tests are split between the workers sets its module fixtures up on
    each). The same order in every worker (xdist requires it); alone, the order changes
    nothing a test checks."""
    from file_seconds import load

    seconds = load()
    files = {item.nodeid: item.nodeid.split("::")[0] for item in items}
    studies = {files[item.nodeid] for item in items if "ray_session" in getattr(item, "fixturenames", ())}
    items.sort(key=lambda item: (-seconds.get(files[item.nodeid], 0.0), files[item.nodeid] not in studies))
