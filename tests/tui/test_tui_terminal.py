"""The explorer in a real terminal: `advisor tui` under tmux (send-keys / capture-pane)
shows the table and the plot, reacts to keys and quits cleanly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recorded_study import write_recorded_study

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _tmux(socket: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, check=True).stdout


def _wait_for(socket: str, *needles: str, timeout: float = 30.0) -> str:
    """The screen once it shows every one of ``needles`` (on a busy machine the header can
    be drawn a frame before the table and the plot)."""
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = _tmux(socket, "capture-pane", "-p", "-t", "explorer")
        if all(n in screen for n in needles):
            return screen
        time.sleep(0.3)
    raise AssertionError(f"{[n for n in needles if n not in screen]!r} never appeared; the screen was:\n{screen}")


def test_tui_under_tmux(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    write_recorded_study(url)
    socket = f"advisor-test-{os.getpid()}"
    advisor = str(Path(sys.executable).with_name("advisor"))
    env = f"env TERM=xterm-256color COLUMNS=120 LINES=40 {advisor} tui --storage {url} --export-dir {tmp_path}"
    _tmux(socket, "new-session", "-d", "-s", "explorer", "-x", "120", "-y", "40", env + "; sleep 30")
    try:
        _wait_for(socket, "Pareto front (feasible): 7 shown", "samples/s", "11,873", "bs=256 fp32 channels_last",
                  "x: throughput (samples/s)", "┤")  # the table, and the plot with its axis
        _tmux(socket, "send-keys", "-t", "explorer", "v", "v")
        _wait_for(socket, "failed and skipped trials: 2 shown", "CUDA out of memory")
        _tmux(socket, "send-keys", "-t", "explorer", "v")
        _wait_for(socket, "Pareto front (feasible): 7 shown")
        _tmux(socket, "send-keys", "-t", "explorer", "Down", "Down")
        _wait_for(socket, "trial 2 — on the front")
        _tmux(socket, "send-keys", "-t", "explorer", "e")
        _wait_for(socket, "trial 2 exported")
        assert (tmp_path / "digits_cnn-cpu-trial2.yaml").exists(), sorted(p.name for p in tmp_path.iterdir())
        _tmux(socket, "send-keys", "-t", "explorer", "q")
        _wait_for(socket, "exported " + str(tmp_path / "digits_cnn-cpu-trial2.yaml"))  # printed on exit
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
