"""docs/architecture.md keeps up with the layer table of tests/test_layers.py.

The rule: the doc's floor table has one row per package, ``| FLOOR | `PATH/` | ...``,
where PATH is the package's source folder relative to the repository (``advisor/core``,
``tui``, ``search_spaces``: the folders test_layers reads). Every package of
``test_layers.FLOORS`` has such a row with the same floor, and the table names no
package that ``FLOORS`` lacks. Every package folder (``advisor/*/__init__.py``, and the
folders test_layers installs under ``advisor``) is in ``FLOORS``, so a new package
cannot be added without a floor, and then not without a row here.
"""

from __future__ import annotations

import re

from test_layers import FLOORS, SOURCES

from conftest import REPO

DOC = REPO / "docs" / "architecture.md"
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*`([\w/]+)/`\s*\|", re.MULTILINE)


def source_folder(package: str) -> str:
    """'core' -> 'advisor/core'; 'tui' -> 'tui' (installed as advisor.tui)."""
    root = SOURCES.get(f"advisor.{package}", REPO / "advisor" / package)
    return root.relative_to(REPO).as_posix()


def doc_floors(text: str) -> dict[str, int]:
    """The doc's floor table: source folder -> floor."""
    rows: dict[str, int] = {}
    for floor, folder in ROW.findall(text):
        assert folder not in rows, f"docs/architecture.md: two rows for `{folder}/`"
        rows[folder] = int(floor)
    return rows


def floor_problems(text: str) -> list[str]:
    rows = doc_floors(text)
    problems = []
    for package, floor in sorted(FLOORS.items(), key=lambda kv: (kv[1], kv[0])):
        folder = source_folder(package)
        if folder not in rows:
            problems.append(f"`{folder}/` (floor {floor}) has no row in the floor table")
        elif rows[folder] != floor:
            problems.append(f"`{folder}/` is on floor {rows[folder]} in the doc, {floor} in tests/test_layers.py")
    known = {source_folder(p) for p in FLOORS}
    problems += [f"`{folder}/` is in the doc's floor table but not in tests/test_layers.py"
                 for folder in sorted(set(rows) - known)]
    return problems


def test_every_package_has_its_floor_in_the_doc():
    problems = floor_problems(DOC.read_text())
    assert not problems, "docs/architecture.md:\n" + "\n".join(problems)


def test_every_package_folder_is_in_the_layer_table():
    folders = {p.parent.name for p in (REPO / "advisor").glob("*/__init__.py")}
    folders |= {name.removeprefix("advisor.") for name in SOURCES if name != "advisor"}
    missing = sorted(folders - set(FLOORS))
    assert not missing, f"packages without a floor in tests/test_layers.py (FLOORS): {missing}"


def test_every_package_has_a_paragraph_in_the_doc():
    """Besides its row, each package is described in *What each package holds*."""
    text = DOC.read_text()
    held = text.split("## What each package holds", 1)[1].split("\n## ", 1)[0]
    missing = [source_folder(p) for p in FLOORS if f"**`{source_folder(p)}/`**" not in held]
    assert not missing, f"docs/architecture.md, What each package holds: no paragraph for {missing}"


def test_readme_points_to_the_doc():
    assert "docs/architecture.md" in (REPO / "README.md").read_text()


# ---- the check itself: it must catch what it is for ------------------------------------

def test_the_check_catches_a_missing_or_moved_package():
    text = DOC.read_text()
    assert not floor_problems(text)
    without_core = re.sub(r"^\| 0 \| `advisor/core/`.*\n", "", text, flags=re.MULTILINE)
    assert any("`advisor/core/` (floor 0) has no row" in p for p in floor_problems(without_core))
    moved = text.replace("| 4 | `advisor/runner/`", "| 3 | `advisor/runner/`")
    assert any("`advisor/runner/` is on floor 3" in p for p in floor_problems(moved))
    extra = text.replace("| 8 | `advisor/cli/`", "| 8 | `advisor/ledger/` | x | x |\n| 8 | `advisor/cli/`")
    assert any("`advisor/ledger/` is in the doc" in p for p in floor_problems(extra))
