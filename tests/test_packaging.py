"""What a wheel installs: one top-level name, ``advisor``; the explorer and the presets
(top-level folders in the repository) inside it as ``advisor.tui`` and
``advisor.search_spaces``, with their data files. An editable install maps them the same
way (every other test imports them so)."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from conftest import REPO


def test_the_wheel_installs_only_the_advisor_package(tmp_path):
    pytest.importorskip("setuptools")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(REPO)], check=True, capture_output=True)
    [wheel] = tmp_path.glob("advisor-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.startswith("advisor-")}
    assert top == {"advisor"}
    for needed in ("advisor/tui/advisor.tcss", "advisor/tui/screens/main.py", "advisor/search_spaces/default.yaml",
                   "advisor/py.typed", "advisor/core/config.py", "advisor/cli/main.py"):
        assert needed in names, needed
    # every package of the repository is in the wheel (a package left out of pyproject's list
    # imports in an editable install and is missing from a real one)
    for init in sorted(REPO.joinpath("advisor").rglob("__init__.py")):
        package = init.relative_to(REPO).as_posix()
        assert package in names, f"{package} is not in the wheel: add it to [tool.setuptools] packages"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "advisor = advisor.cli.main:entry" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_presets_and_the_explorer_load_under_the_advisor_name():
    from importlib import resources

    from advisor import search_spaces

    assert "default" in search_spaces.names() and search_spaces.read("default")
    assert (resources.files("advisor.tui") / "advisor.tcss").is_file()
