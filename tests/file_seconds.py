"""How long each test file took in a whole-suite run (README command 2, `-n 2`), so that
conftest.py can start the longest files first: under `--dist worksteal` the run then ends on
short tests rather than on one worker still in a long study (on this 2-core machine the
longest file, the doctor's, takes over a minute).

The figures only order the files; stale or missing ones change nothing a test checks (a file
not listed runs after the listed ones, in collection order). To refresh them:

    .venv/bin/python -m pytest -q -n 2 --dist worksteal --junitxml=/tmp/junit.xml
    .venv/bin/python tests/file_seconds.py /tmp/junit.xml
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

TABLE = Path(__file__).with_name("file_seconds.json")
MIN_SECONDS = 3.0  # files shorter than this are left in collection order


def load() -> dict[str, float]:
    """The table: test file (as in a node id, "tests/cli/test_doctor.py") -> seconds; {} without one."""
    try:
        return {str(k): float(v) for k, v in json.loads(TABLE.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def from_junit(path: str) -> dict[str, float]:
    """Seconds per test file from a pytest --junitxml report (setup, call and teardown)."""
    import xml.etree.ElementTree as ET

    seconds: Counter[str] = Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")  # tests.cli.test_doctor[.TestClass]
        end = next((i + 1 for i, part in enumerate(parts) if part.startswith("test_")), len(parts))
        seconds["/".join(parts[:end]) + ".py"] += float(case.get("time", 0) or 0)
    return {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1]) if v >= MIN_SECONDS}


if __name__ == "__main__":
    TABLE.write_text(json.dumps(from_junit(sys.argv[1]), indent=1) + "\n")
    print(f"wrote {TABLE}")
