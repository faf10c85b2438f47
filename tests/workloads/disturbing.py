"""The digits MLP, except that building the model while the file MARKER exists deletes it
and starts busy processes (two per CPU the trial may use; they inherit its CPU affinity) that
spin until that trial's process exits (at most 30 s): a real disturbance of the machine for
the whole of that one trial, both sentinel readings included, and none for its re-run in a
fresh process (tests/study/test_confirm.py). Building it for the memory estimate that
comes first (on fake tensors, advisor/trial/estimate.py) disturbs nothing. The marker lives in the temp directory, which
the trial processes (Ray workers started before the test) share with the test."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

MARKER = Path(tempfile.gettempdir()) / "advisor-test-disturb-now"

_here = Path(__file__).resolve().parents[2] / "examples" / "digits_mlp.py"
exec(compile(_here.read_text(), str(_here), "exec"))  # noqa: S102 - the example's contract, unchanged

_build = model  # noqa: F821 - defined by the example


def _estimating() -> bool:
    """Built on fake tensors: advisor's memory estimate, before the trial proper."""
    import torch

    return torch._guards.detect_fake_mode() is not None


def model():  # noqa: F811
    if MARKER.exists() and not _estimating():
        os.unlink(MARKER)
        spin = (f"import os, time\nt = time.time()\n"
                f"while os.getppid() == {os.getpid()} and time.time() - t < 30: pass")
        for _ in range(2 * len(os.sched_getaffinity(0))):
            subprocess.Popen([sys.executable, "-c", spin])
    return _build()
