"""Ray that cannot start, or an environment naming another cluster: a clear error with exit
status 2 and nothing written, or a local Ray all the same. Each runs in a fresh process
(this test session's own Ray is already up, and ``RayExecutor.start`` would reuse it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

from conftest import WORKLOADS

VALID = str(WORKLOADS / "valid.py")


def advisor(args: list[str], cwd, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | env
    return subprocess.run([sys.executable, "-m", "advisor", *args], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=300)


def test_a_ray_state_dir_that_cannot_be_made_exits_2(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    run = advisor(["tune", VALID, "--trials", "1", "--no-tui"], tmp_path, ADVISOR_RAY_DIR=str(blocker))
    assert run.returncode == 2, run.stderr
    assert f"cannot start Ray on this machine: its state in {blocker} ($ADVISOR_RAY_DIR) cannot be made " \
           "private to you" in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "advisor.db").exists()


def test_a_ray_state_dir_too_long_for_its_sockets_exits_2_saying_so(tmp_path):
    """Seen on the GPU machine under pytest's long tmp_path: Ray's socket paths have at most
    107 bytes. The error says which directory, and to choose a shorter one."""
    long_dir = tmp_path / ("d" * 60) / ("e" * 60)
    run = advisor(["tune", VALID, "--trials", "1", "--no-tui"], tmp_path, ADVISOR_RAY_DIR=str(long_dir))
    assert run.returncode == 2, run.stderr
    assert f"its state in {long_dir} ($ADVISOR_RAY_DIR)" in run.stderr
    assert "set ADVISOR_RAY_DIR to a shorter directory" in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "advisor.db").exists()


def test_ray_address_in_the_environment_is_the_cluster_to_join(tmp_path):
    """`advisor tune` reads $RAY_ADDRESS as --ray-address (as Ray's tools do): an unreachable
    one is refused at once, naming the variable, instead of Ray retrying for minutes."""
    for command in (["tune", VALID, "--trials", "1", "--no-tui"], ["hardware"]):
        run = advisor(command, tmp_path, RAY_ADDRESS="127.0.0.1:1")
        assert run.returncode == 2, (command, run.stderr)
        assert "cannot reach the Ray cluster at '127.0.0.1:1' (from $RAY_ADDRESS; unset it for a local Ray)" \
               in run.stderr
    assert not (tmp_path / "advisor.db").exists()


def test_a_local_ray_ignores_ray_address():
    """The executor's own Ray (no address given: advisor.tune() without ray_address=) starts
    locally even when $RAY_ADDRESS names another cluster, which ray.init alone would join."""
    state = tempfile.mkdtemp(prefix="advr-")  # short: Ray's unix sockets live there
    script = textwrap.dedent(f"""
        import ray
        from advisor.runner.ray_executor import RayExecutor
        executor = RayExecutor("cpu", state_dir=__import__("pathlib").Path({state!r})).start()
        print("GCS", ray.get_runtime_context().gcs_address, executor.started_here)
        ray.shutdown()
    """)
    environ = os.environ | {"RAY_ADDRESS": "127.0.0.1:1"}
    try:
        run = subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    assert run.returncode == 0, run.stderr
    line = next(x for x in run.stdout.splitlines() if x.startswith("GCS"))
    assert line.endswith(" True") and "127.0.0.1:1 " not in line + " "


def test_a_local_ray_that_fails_to_start_is_started_once_more():
    """Ray draws some of its ports at random, and two instances starting at once on one
    machine can draw the same one (ray-project/ray#53906): the start is tried again. The
    collision cannot be provoked on demand, so ray.init here is a stand-in that fails as one
    does: on every try (the error says it tried twice), then on the first try only (Ray's
    own second start follows). Before its second try the executor draws a random wait (its
    ports are drawn at random too); the draw is noted, and not slept here."""
    state = tempfile.mkdtemp(prefix="advr-")
    script = textwrap.dedent(f"""
        import pathlib
        import ray
        import advisor.runner.ray_executor as ray_executor
        from advisor.core.errors import SchedulerError
        from advisor.runner.ray_executor import RayExecutor
        real, calls, waits = ray.init, [], []
        def flaky(*args, **kwargs):  # the stand-in: a collision, then (with "once") Ray's own start
            calls.append(1)
            if len(calls) == 1 or always:
                raise RuntimeError("Failed to start GCS: address 127.0.0.1:53421 already in use")
            return real(*args, **kwargs)
        class Draws:  # the executor's random wait between tries, noted (an interval of seconds) as 0 s
            def uniform(self, low, high):
                waits.append(0 < low < high)
                return 0.0
        ray.init, ray_executor.random = flaky, Draws()
        for always in (True, False):
            calls.clear()
            try:
                executor = RayExecutor("cpu", state_dir=pathlib.Path({state!r})).start()
                print("STARTED", len(calls), executor.started_here)
                ray.shutdown()
            except SchedulerError as exc:
                print("ERROR", len(calls), exc)
        print("WAITS", waits)
    """)
    try:
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and len(lines) == 3, run.stdout + run.stderr
    assert lines[0].startswith("ERROR 2 cannot start Ray on this machine (its state in ") and lines[0].endswith(
        "(tried 2 times): RuntimeError: Failed to start GCS: address 127.0.0.1:53421 already in use "
        "(README: Troubleshooting)"), lines[0]
    assert lines[1] == "STARTED 2 True", run.stdout + run.stderr
    assert lines[2] == "WAITS [True, True]", lines[2]  # a wait before each second try


def test_a_study_leaves_no_fork_server_folder_in_the_temp_folder(tmp_path):
    """Each trial's Ray worker runs a fork server whose socket lies in a pymp-* folder of the
    temp folder; Ray ends its workers with a signal, so the folders stayed behind, one or
    more a study. The executor removes them once the workers are gone (runner/leftovers.py)."""
    temp = tempfile.mkdtemp(prefix="advt-")  # short: the fork server's socket lives there
    state = tempfile.mkdtemp(prefix="advr-")
    try:
        run = advisor(["tune", VALID, "--trials", "2", "--no-tui", "--train-samples", "64"], tmp_path,
                      TMPDIR=temp, ADVISOR_RAY_DIR=state)
        left = sorted(os.listdir(temp))
    finally:
        shutil.rmtree(temp, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert [name for name in left if name.startswith("pymp-")] == [], left
