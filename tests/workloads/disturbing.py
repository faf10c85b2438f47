"""The digits MLP, except that building the model while the file MARKER exists deletes it
and starts two busy processes for a few seconds: a real disturbance of the machine during
that one trial (tests/study/test_confirm.py). The marker lives in the temp directory, which
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


def model():  # noqa: F811
    if MARKER.exists():
        os.unlink(MARKER)
        for _ in range(2):
            subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 4: pass"])
    return _build()
