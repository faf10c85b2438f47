"""What advisor exposes: the embedded Ray instance listens on loopback only; its state
directory, auth token and the SQLite storage are readable by the user only."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from advisor.cli.main import main

from conftest import EXAMPLES


@pytest.mark.ray
def test_embedded_ray_is_on_loopback(ray_session):
    nodes = ray_session.nodes()
    assert nodes and all(n["NodeManagerAddress"] == "127.0.0.1" for n in nodes)


@pytest.mark.ray
@pytest.mark.skipif(shutil.which("ss") is None, reason="needs `ss` (iproute2) to list listening sockets")
def test_embedded_ray_listens_on_loopback_only(ray_session):
    """Every TCP socket that the session's Ray processes listen on is bound to 127.0.0.1."""
    state = ray_session._private.worker._global_node.get_temp_dir_path()
    pids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if state.encode() in fh.read():
                    pids.add(pid)
        except OSError:
            pass
    pids.add(str(os.getpid()))
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    mine = [line.split() for line in out.splitlines() if any(f"pid={p}," in line for p in pids)]
    assert mine, "the Ray processes listen somewhere"
    for fields in mine:
        local = fields[3]
        assert local.rsplit(":", 1)[0] in ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]"), fields


@pytest.mark.ray
def test_state_dir_token_and_storage_are_private(ray_session, workdir):
    """Ray chmods its own temp dir to 0777; advisor keeps it inside a 0700 directory."""
    ray_dir = Path(ray_session._private.worker._global_node.get_temp_dir_path())
    state = ray_dir.parent
    assert ray_dir.name == "ray"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    # the token: in the state directory of this process's first local Ray (a later local Ray
    # of the same process keeps it: given another, its GCS did not start); under pytest-xdist
    # an earlier test in this worker may have started one
    token = Path(os.environ["RAY_AUTH_TOKEN_PATH"])
    assert token.name == "auth_token" and stat.S_IMODE(token.stat().st_mode) == 0o600
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    assert main(["tune", str(EXAMPLES / "digits_mlp.py"), "--space", "eager", "--trials", "1",
                 "--train-samples", "100"]) == 0
    assert stat.S_IMODE((workdir / "advisor.db").stat().st_mode) == 0o600
