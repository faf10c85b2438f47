"""Small helpers shared by the benchmark scripts."""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def commit() -> str:
    """The short hash of the checked-out commit ("" outside git)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=HERE).stdout.strip()
    except OSError:
        return ""
