"""advisor's version, in one place: ``advisor.__version__`` and ``advisor --version`` read it
(pyproject.toml's ``version`` must match; tests/cli/test_version.py checks)."""

from __future__ import annotations

VERSION = "0.1.0"
