"""Screenshots of the main screen, the failed-trials view and the help screen at 80x24
and 120x40, on the recorded study (fixed figures, so the pictures are stable).
Update after an intended change: pytest tests/tui/test_tui_snapshots.py --snapshot-update"""

from __future__ import annotations

import pytest
from explorer_pilot import loaded

from advisor.tui import make_app

from recorded_study import write_recorded_study

SIZES = [(80, 24), (120, 40)]


@pytest.fixture
def app(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    write_recorded_study(url)
    return make_app(url, export_dir=tmp_path)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen(app, size, snap_compare):
    assert snap_compare(app, terminal_size=size, press=["down", "down", "_"], run_before=loaded)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_failed_trials_view(app, size, snap_compare):
    assert snap_compare(app, terminal_size=size, press=["v", "v", "_"], run_before=loaded)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_help_screen(app, size, snap_compare):
    assert snap_compare(app, terminal_size=size, press=["question_mark", "_"], run_before=loaded)
