"""Where a trial's output goes: everything model.py writes to stdout and stderr (print,
logging, C extensions writing to the file descriptors) is drained from a pipe by a thread
of the process that supervises the trial, into a bounded log file on the trial's node,
never through Ray to the driver's console.

The log keeps the last ``ADVISOR_TRIAL_LOG_BYTES`` (default 1 MiB) of each trial's output
in two halves (``NAME.log``, and ``NAME.log.1`` before it), in ``advisor-trials/`` of the
Ray session's log directory on that node; only the newest ``KEEP_LOGS`` trials' logs are
kept. The trial's result carries the last ``TAIL_BYTES`` of it (``telemetry["output"]``);
a trial process that dies without a result shows that tail in its failure message. The
drain runs outside the trial process (a forked or spawned trial, a rank), so a process
printing megabytes per step pays only for its own writes into a 1 MiB pipe.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from advisor.core.drain import OutputDrain, captured_here, describe_tail, redirect_into

__all__ = ["OutputDrain", "captured_here", "describe_tail", "redirect_into", "trial_drain", "trial_log_path", "with_output"]

LOG_BYTES = int(os.environ.get("ADVISOR_TRIAL_LOG_BYTES", str(1 << 20)))
KEEP_LOGS = 200  # trial logs kept per node and Ray session, newest first
_COUNTER = iter(range(1 << 62))


def trial_drain(kind: str = "trial") -> OutputDrain:
    """A drain for a new trial's (or rank's) output, into its bounded log file."""
    return OutputDrain(trial_log_path(kind), LOG_BYTES)


def trial_log_path(kind: str = "trial") -> Path | None:
    """A new log file's path in ``advisor-trials/`` of this node's Ray session logs (in a
    Ray worker) or of the temp directory; the oldest logs beyond ``KEEP_LOGS`` are removed.
    None when no such directory can be made."""
    try:
        from ray._private import worker

        node = worker._global_node
        base = Path(node.get_logs_dir_path()) if node is not None else None
    except (ImportError, AttributeError):
        base = None
    base = base or Path(tempfile.gettempdir()) / f"advisor-logs-{os.getuid()}"
    directory = base / "advisor-trials"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        _prune(directory)
    except OSError:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return directory / f"{kind}-{stamp}-{os.getpid()}-{next(_COUNTER)}.log"


def _prune(directory: Path) -> None:
    logs = sorted(directory.glob("*.log"), key=_mtime)
    for old in logs[:max(0, len(logs) - KEEP_LOGS + 1)]:
        for path in (old, Path(f"{old}.1")):
            with contextlib.suppress(OSError):
                path.unlink()


def _mtime(path: Path) -> float:
    """0 for a log another worker's prune has just removed (the glob raced it)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def with_output(result: Any, output: dict[str, Any]) -> Any:
    """``result`` (a TrialResult) with its output's summary; a process that died without a
    result (``crash``) says how its output ended."""
    result.telemetry["output"] = output
    if result.failure_class == "crash" and output["tail"] and "output ended with" not in (result.failure_message or ""):
        result.failure_message = f"{result.failure_message}\n{describe_tail(output)}"
    return result
