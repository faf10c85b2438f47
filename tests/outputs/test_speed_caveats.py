"""A trial timed on a busy machine, or whose timing did not settle, says so wherever its
speed is shown: its line in tune, the front table, `advisor trials` (table and --json),
the report and the dashboard's notes. The telemetry is made up (named as such): a real
busy machine cannot be summoned on cue; the rule that reads it is the product's own."""

from __future__ import annotations

import io
import json
import re

import pytest

from advisor.core.caveats import BUSY, UNSETTLED, legend, mark, speed_caveats
from tests.recorded_study import NAME, write_recorded_study


def busy_telemetry(median: float = 0.4, self_contended: bool = False) -> dict:
    scores = [median - 0.05, median, median + 0.05, median, median + 0.1]
    return {"interference": {"blocks": 5, "clean": 5, "scores": scores, "self_contended": self_contended}}


def unsettled_telemetry(low: float = 0.009, high: float = 0.012, blocks: int = 8) -> dict:
    return {"timing": {"converged": False, "median_s": 0.01, "low_s": low, "high_s": high, "blocks": blocks,
                       "tolerance": 0.05}}


def test_the_rule_reads_the_stored_telemetry():
    assert speed_caveats(None) == [] and speed_caveats({}) == [] and speed_caveats({"threads": 2}) == []
    quiet = {**busy_telemetry(0.02), "timing": {"converged": True, "median_s": 0.01, "low_s": 0.0099,
                                                "high_s": 0.0101, "blocks": 9, "tolerance": 0.05}}
    assert speed_caveats(quiet) == []
    [busy] = speed_caveats(busy_telemetry(0.4))
    assert busy.kind == BUSY and "lost a median 40% of their time to other work (over 15%" in busy.text
    assert speed_caveats(busy_telemetry(0.4, self_contended=True)) == []  # its own ranks: its configuration
    assert speed_caveats(busy_telemetry(0.12)) == []  # under the ceiling
    [loose] = speed_caveats(unsettled_telemetry())
    assert loose.kind == UNSETTLED
    assert "did not settle in the time allowed: its median step is known to about +-15% (the study asked +-5%)" \
        in loose.text  # exp((ln 12 - ln 9) / 2) = 1.155
    [few] = speed_caveats(unsettled_telemetry(blocks=1))
    assert "1 timed block after the warm-up, fewer than the 6 a verdict needs" in few.text
    # stopped short of its steps or clean blocks, yet known to +-2% where +-5% was asked: no caveat (a
    # review read "known to about +-2% (the study asked +-5%)" beside "(unsettled)")
    assert speed_caveats(unsettled_telemetry(low=0.0098, high=0.0102)) == []
    both = speed_caveats({**busy_telemetry(), **unsettled_telemetry()})
    assert [c.kind for c in both] == [BUSY, UNSETTLED] and mark(both) == " (busy, unsettled)"
    assert mark([]) == "" and legend([]) == ""
    assert legend([UNSETTLED]).startswith("After samples/s, (unsettled): ") and "(busy)" not in legend([UNSETTLED])


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    write_recorded_study(url, telemetry={1: busy_telemetry(), 3: unsettled_telemetry()})  # both on the front
    return url


def test_every_view_of_the_speed_says_so(url, tmp_path, capsys):
    from rich.console import Console

    from advisor.cli.main import main
    from advisor.core.stored import read_study
    from advisor.outputs.console import front_table, trial_text
    from advisor.outputs.dashboard_notes import notes
    from advisor.study.storage import stores as st

    study = read_study(st.load(st.open_storage(url, must_exist=True), NAME, url))
    console = Console(width=250, record=True, file=io.StringIO())
    console.print(front_table(study))
    text = console.export_text()
    rows = {int(m[1]): line for line in text.splitlines() if (m := re.match(r"\W*(\d+)\b", line))}
    assert re.search(r"10,240 \(busy\)", rows[1]) and re.search(r"10,911 \(unsettled\)", rows[3])
    assert "(busy)" not in rows[2] and "(unsettled)" not in rows[0]
    flat = " ".join(text.split())
    assert "After samples/s, (busy): timed on a busy machine" in flat and "(unsettled): its timing did not" in flat

    records = {r.number: r for r in study.records}
    line = trial_text(_result(records[1]), records[1], study.versus_baseline(records[1]), study.metric)
    assert "[timed on a busy machine: its timed blocks lost a median 40% of their time" in line
    assert "[its timing did not settle" in trial_text(_result(records[3]), records[3], None, study.metric)
    assert "[" not in trial_text(_result(records[2]), records[2], None, study.metric)

    assert main(["trials", NAME, "--storage", url, "--json"]) == 0
    listed = {t["trial"]: t for t in json.loads(capsys.readouterr().out)["trials"]}
    assert [c["kind"] for c in listed[1]["speed_caveats"]] == [BUSY]
    assert [c["kind"] for c in listed[3]["speed_caveats"]] == [UNSETTLED] and listed[2]["speed_caveats"] == []
    assert main(["trials", NAME, "--storage", url]) == 0
    table = " ".join(capsys.readouterr().out.split())
    assert "(busy)" in table and "(the last column says by how much)" in table

    assert main(["report", "--storage", url, "-o", str(tmp_path / "report"), "--json"]) == 0
    reported = {e["trial"]: e for e in json.loads(capsys.readouterr().out)["front"]}
    assert [c["kind"] for c in reported[3]["speed_caveats"]] == [UNSETTLED]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "| 10,240 (busy) |" in report and "After samples/s, (busy)" in report

    written = notes(study)
    assert "- **speed**: timed on a busy machine" in written[1] and "**speed**" not in written[2]
    assert "10,911 (unsettled)" in written[None]


def _result(record):
    from advisor.core.results import TrialResult

    f = record.figures
    return TrialResult(ok=True, throughput=f.throughput, peak_memory_bytes=f.peak_memory_bytes, score=f.score)


def test_the_explorers_detail_says_so(url):
    from advisor.study.storage import stores as st
    from advisor.tui.data import StudyData
    from advisor.tui.widgets.detail import describe

    data = StudyData(st.open_storage(url), NAME)
    data.reload()
    rows = {r.number: r for r in data.view("all")}

    busy = describe(rows[1], data.attrs).plain
    assert "speed: timed on a busy machine: its timed blocks lost a median 40%" in busy and "running" not in busy
    assert "speed: its timing did not settle" in describe(rows[3], data.attrs).plain
    assert "speed:" not in describe(rows[2], data.attrs).plain
    from advisor.tui.widgets.trial_table import TrialTable

    cells = {n: TrialTable._figure_cells(rows[n]) for n in (1, 2, 3)}
    assert cells[1][1][0].endswith("(busy)") and cells[3][1][0].endswith("(unsettled)") and "(" not in cells[2][1][0]
