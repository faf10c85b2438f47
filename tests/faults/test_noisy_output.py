"""Noisy user code (issue 18): a model.py that prints megabytes per step, logs from many
threads or writes binary junk finishes its trials, keeps the driver's console quiet and
Ray's log directory bounded, and a failing one still reads as the user's exception line
(or, for a hard crash, the end of its output). Real `advisor tune` runs on the session's
real Ray, real processes, real SQLite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from advisor.cli.main import main
from advisor.core.drain import OutputDrain
from advisor.trial.output import LOG_BYTES

from conftest import WORKLOADS, exit_status, write_model

FAST = ["--train-samples", "300", "--sampler", "random", "--trial-timeout", "300"]
CONSOLE_LIMIT = 64 * 1024  # the driver's own output is ~4 KB; the workloads write megabytes


def tune(workload: Path, workdir: Path, space: str, trials: int) -> list[optuna.trial.FrozenTrial]:
    (workdir / "space.yaml").write_text(space)
    assert main(["tune", str(workload), "--space", str(workdir / "space.yaml"), "--trials", str(trials), *FAST]) == 0
    study = optuna.load_study(study_name=f"{workload.stem}-space", storage=f"sqlite:///{workdir / 'advisor.db'}")
    return [t for t in study.get_trials() if "duplicate_of" not in t.user_attrs]


def log_size(where: str) -> int:
    """Bytes of a trial's log on this machine: its file and the half before it."""
    path = Path(where.split(":", 1)[1])
    assert path.exists(), where
    return sum(p.stat().st_size for p in (path, Path(f"{path}.1")) if p.exists())


@pytest.mark.ray
def test_megabytes_per_step_finish_quietly(ray_session, workdir, capfd):
    """~3 MB per step (print, os.write without newlines, binary junk): both trials complete;
    the console gets the driver's lines only (the preflight's step too is captured); each
    trial's log on disk keeps at most ADVISOR_TRIAL_LOG_BYTES of the tens of MB written."""
    trials = tune(WORKLOADS / "noisy_prints.py", workdir, "batch_size: {choices: [32, 64]}\n", 2)
    out, err = capfd.readouterr()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert len(out) + len(err) < CONSOLE_LIMIT, (len(out), len(err))
    assert "step chatter" not in out + err and "Pareto front" in out
    for t in trials:
        output = t.user_attrs["telemetry"]["output"]
        assert output["bytes"] > 10 * LOG_BYTES  # the trial did print megabytes ...
        assert 0 < log_size(output["log"]) <= LOG_BYTES  # ... and the disk kept a bounded part
        assert output["tail"] and all(c.isprintable() or c in "\n\t" for c in output["tail"])


@pytest.mark.ray
def test_logging_from_twelve_threads_finishes_quietly(ray_session, workdir, capfd):
    """12 threads logging and printing while the model trains (in the preflight too, and on
    for a second after it): trials complete, the console stays the driver's."""
    trials = tune(WORKLOADS / "noisy_threads.py", workdir, "batch_size: {choices: [32, 64]}\n", 2)
    out, err = capfd.readouterr()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert len(out) + len(err) < CONSOLE_LIMIT, (len(out), len(err))
    assert "says hello" not in out + err and "still busy" not in out + err
    assert all("still busy" in t.user_attrs["telemetry"]["output"]["tail"] or
               "says hello" in t.user_attrs["telemetry"]["output"]["tail"] for t in trials)


@pytest.mark.ray
def test_noisy_failures_keep_the_users_error(ray_session, workdir, capfd):
    """A noisy model.py's exception is the failure's message (its line and model.py's
    frame), and a hard crash shows how its output ended, however much came before."""
    trials = tune(WORKLOADS / "noisy_fails.py", workdir, "batch_size: {choices: [16, 32, 64]}\n", 3)
    out, err = capfd.readouterr()
    by_bs = {t.user_attrs["config"]["batch_size"]: t for t in trials}
    assert by_bs[16].state.name == "COMPLETE"
    raised, crashed = by_bs[32].user_attrs, by_bs[64].user_attrs
    assert raised["failure_class"] == "error"
    assert "ValueError: noisy model.py gave up at step 4" in raised["failure_message"]
    assert "noisy_fails.py" in raised["failure_message"]
    assert crashed["failure_class"] == "crash"
    assert "SIGABRT" in crashed["failure_message"]
    assert "last words before the crash" in crashed["failure_message"]
    assert len(crashed["failure_message"]) < 8000
    assert len(out) + len(err) < CONSOLE_LIMIT, (len(out), len(err))


def test_a_noisy_preflight_failure_names_the_error_and_the_output(workdir, capfd):
    """The preflight runs model.py in the driver: its megabytes are not shown, and when it
    fails the error says what failed and how model.py's output ended."""
    path = write_model(workdir, "import os, sys, torch\nfrom torch import nn\n"
                                "from torch.utils.data import TensorDataset\n\n"
                                "def model():\n    sys.stdout.write('build noise\\n' * 200_000)\n"
                                "    os.write(2, b'\\x00\\x1b[2J' * 100_000)\n"
                                "    print('about to fail', file=sys.stderr)\n    return nn.Linear(4, 2)\n\n"
                                "def datasets():\n    x = torch.randn(8, 5)\n"
                                "    y = torch.zeros(8, dtype=torch.long)\n"
                                "    return TensorDataset(x, y), TensorDataset(x, y)\n")
    assert exit_status(["tune", str(path), "--trials", "1"]) == 2
    out, err = capfd.readouterr()
    assert len(out) + len(err) < CONSOLE_LIMIT, (len(out), len(err))
    assert "build noise" not in out and "\x1b[2J" not in out + err
    assert "model.py" in err and "about to fail" in err


def test_the_drain_keeps_a_bounded_log_of_a_real_writer(tmp_path):
    """A real process writing 20 MB through the drain: it finishes, the disk keeps at most
    the limit (the newest output: the last line is there), the tail is the last line."""
    drain = OutputDrain(tmp_path / "p.log", limit=64 * 1024)
    code = "import os\nfor i in range(20): os.write(1, b'x' * 1_000_000)\nprint('the very end')"
    proc = subprocess.run([sys.executable, "-c", code], stdout=drain.write_fd, stderr=drain.write_fd, timeout=60)
    summary = drain.finish()
    assert proc.returncode == 0
    assert summary["bytes"] == 20_000_000 + len("the very end\n")
    assert summary["tail"].endswith("the very end")
    kept = [tmp_path / "p.log", tmp_path / "p.log.1"]
    assert sum(p.stat().st_size for p in kept) <= 64 * 1024
    # the newest output, across the two halves (a rotation may fall inside the last line)
    older = (tmp_path / "p.log.1").read_bytes() if (tmp_path / "p.log.1").exists() else b""
    assert (older + (tmp_path / "p.log").read_bytes()).endswith(b"the very end\n")
