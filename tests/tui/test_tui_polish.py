"""The explorer as a user first saw it in a 160x45 terminal (issue 32): cells that cut
words, ticks like '4810.7', every knob before what changed. Driven with Textual's Pilot on
the recorded study in real SQLite storage."""

from __future__ import annotations

import pytest
from explorer_pilot import loaded

from advisor.core.config import TrialConfig
from advisor.core.stored import METRIC_NOISE
from advisor.tui import make_app
from advisor.tui.cells import ELLIPSIS, clip_words, fit_cells, nice_ticks, tick_labels
from advisor.tui.data import StudyData
from advisor.tui.widgets import ScatterPlot, TrialDetail, TrialTable
from advisor.tui.widgets.detail import describe

from recorded_study import add_probed_trial, write_recorded_study


@pytest.fixture
def url(tmp_path):
    """The recorded study with a probed-only trial ('not needed') and the metric's noise
    measured, so that small differences read '+0.0 pt, within noise'."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url)
    study.set_user_attr(METRIC_NOISE, {"seeds": [0, 1, 2], "values": [0.9667, 0.9639, 0.9694]})
    add_probed_trial(study)
    return url


def _whole_words_of(cell: str, full: str) -> bool:
    """``cell`` is ``full``, or whole words of it followed by '…'."""
    if cell == full:
        return True
    if not cell.endswith(ELLIPSIS):
        return False
    kept = cell[:-len(ELLIPSIS)].rstrip()
    words = full.split(" ")
    return any(kept == " ".join(words[:n]).rstrip(",;:") for n in range(1, len(words)))


@pytest.mark.parametrize("size", [(160, 45), (120, 40), (80, 24)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_table_cells_fit_the_table_and_never_cut_a_word(url, size):
    app = make_app(url)
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        for view in ("front", "all", "failed"):
            table = app.screen.query_one(TrialTable)
            rows, failed = table.shown
            full = [[c[0] for c in (table._failed_cells(r) if failed else table._figure_cells(r))] for r in rows]
            shown = [[str(table.get_cell_at((i, j))) for j in range(len(table.columns))]
                     for i in range(table.row_count)]
            assert len(shown) == len(full) > 0, view
            for cells, whole in zip(shown, full):
                for cell, text in zip(cells, whole):
                    assert _whole_words_of(cell, text), (view, cell, text)
            if size[0] >= 120:  # wide enough for every number: nothing runs off the table's edge
                assert table.virtual_size.width <= table.size.width, (view, table.virtual_size, table.size)
            await pilot.press("v")
            await loaded(pilot)


async def test_the_clipped_text_is_whole_in_the_detail_pane(url):
    app = make_app(url)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        await pilot.press("v")  # all trials: the probed one, the longest configurations
        await loaded(pilot)
        table = app.screen.query_one(TrialTable)
        last = len(table.columns) - 1  # the configuration
        clipped = [i for i in range(table.row_count) if str(table.get_cell_at((i, last))).endswith(ELLIPSIS)]
        assert clipped, "160x45 should need a clipped configuration"
        i = clipped[0]
        table.move_cursor(row=i)
        await pilot.pause()
        row = table.shown[0][i]
        assert row.description in str(app.screen.query_one(TrialDetail).render())


def test_clip_words_keeps_whole_words():
    assert clip_words("1.52x unconfirmed", 20) == "1.52x unconfirmed"
    assert clip_words("1.52x unconfirmed", 10) == "1.52x …"
    assert clip_words("+0.3 pt, within noise", 14) == "+0.3 pt …"
    assert clip_words("bs=128 fp32 l1_unstructured:0.5", 3) == "bs=128 …"  # never part of a word


def test_fit_cells_narrows_the_widest_text_column_first():
    headers = ("n", "ratio", "configuration")
    rows = [["1", "1.52x unconfirmed", "bs=256 fp32 channels_last compile"], ["2", "0.98x unconfirmed", "bs=64"]]
    assert fit_cells(headers, rows, (False, True, True), 200) == rows  # room: the content's width
    fitted = fit_cells(headers, rows, (False, True, True), 40)
    assert fitted[0][2] == "bs=256 fp32 …" and fitted[0][1] == "1.52x unconfirmed"
    assert sum(max(len(r[j]) for r in fitted) + 2 for j in range(3)) <= 40


def test_ticks_are_round_and_read_in_units():
    ticks = nice_ticks(4120.0, 12500.0)
    assert ticks[0] <= 4120 and ticks[-1] >= 12500 and 4 <= len(ticks) <= 8
    assert tick_labels(ticks) == ["4k", "6k", "8k", "10k", "12k", "14k"]
    assert tick_labels(nice_ticks(95.1, 192.5)) == ["80", "100", "120", "140", "160", "180", "200"]
    assert tick_labels(nice_ticks(0.9611, 0.975)) == ["0.96", "0.965", "0.97", "0.975"]
    assert tick_labels([500.0, 1000.0, 1500.0]) == ["0.5k", "1k", "1.5k"]


async def test_scatter_ticks_are_round_with_the_objective_and_unit_as_titles(url):
    app = make_app(url)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        rendered = str(app.screen.query_one(ScatterPlot).render())
        assert "4120" not in rendered and "6215" not in rendered and "192.5" not in rendered
        for tick in ("4k", "8k", "12k", "100", "200"):
            assert tick in rendered, tick
        assert "throughput (samples/s)" in rendered and "peak memory (MiB)" in rendered


def _rows(url):
    from advisor.study.storage.stores import open_storage

    data = StudyData(open_storage(url), "digits_cnn-cpu")
    data.reload()
    return {r.number: r for r in data.rows}, data


def test_detail_shows_the_changed_knobs_first_and_the_rest_under_a_heading(url):
    rows, data = _rows(url)
    text = str(describe(rows[2], data.attrs, data.baseline.config))
    changed, rest = text.index("changed from the baseline\n"), text.index("knobs, as the baseline has them\n")
    assert text.index("batch_size: 64 -> 256") > changed and text.index("channels_last: false -> true") > changed
    assert changed < rest and "precision=" not in text[:rest]  # no unchanged knob before the heading of the rest
    assert 'precision="fp32"' in text[rest:] and "batch_size=" not in text[rest:]


def test_detail_compares_with_the_baselines_configuration_not_the_defaults(url):
    rows, data = _rows(url)
    baseline = TrialConfig(batch_size=32, threads=1)  # a baseline set apart from the defaults
    text = str(describe(rows[4], data.attrs, baseline))  # trial 4 is batch 32, 1 thread: as that baseline
    assert "no knob changed from the baseline" in text and "batch_size" not in text.split("as the baseline")[0]
    own = str(describe(rows[0], data.attrs, data.baseline.config))  # the baseline itself: against the defaults
    assert "every knob at its default" in own and "knobs, at their defaults" in own


async def test_the_pane_follows_the_study_baseline(url):
    app = make_app(url)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot)
        await pilot.press("down", "down")
        await pilot.pause()
        text = str(app.screen.query_one(TrialDetail).render())
        assert text.index("batch_size: 64 -> 256") < text.index("knobs, as the baseline has them")


def test_an_unconfirmed_ratio_is_the_figure_the_console_printed(tmp_path):
    """Issue 32: trial 3 read '1.00x' in the console and '1.37x unconfirmed' in the explorer,
    the baseline having been measured again (slower) in between. The console's line is
    computed as the trial finishes (``BaselineWatch.versus``), the explorer's cell from the
    stored study (``StoredStudy.versus_baseline``): both by ``reference_throughput_at``, so a
    later measurement never moves a figure already shown."""
    from advisor.core.objectives import Limits
    from advisor.core.results import TrialResult, TrialSettings
    from advisor.core.stop import Stop
    from advisor.core.stored import BASELINE_MEASUREMENTS, figure_time, read_study
    from advisor.outputs.console import trial_text
    from advisor.study.confirmation.baseline_watch import BaselineWatch
    from advisor.study.storage.stores import open_storage

    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url)
    stored = read_study(study)
    base, records = stored.baseline, {r.number: r for r in stored.records}
    t = {n: figure_time(r) for n, r in records.items()}
    # measured again between trials 1 and 2 (a little slow), then after trial 3 (much slower, twice)
    study.set_user_attr(BASELINE_MEASUREMENTS, [{"at": (t[1] + t[2]) / 2, "throughput": 6000.0}])

    def watch() -> BaselineWatch:  # the driver's, as it reads the study on a resume
        return BaselineWatch(study, None, TrialSettings(train_samples=10), base.config, None, Stop(), lambda e: None)

    def console(number: int, w: BaselineWatch) -> tuple[float, str]:
        r = records[number]
        result = TrialResult(ok=True, throughput=r.figures.throughput, peak_memory_bytes=r.figures.peak_memory_bytes,
                             score=r.figures.score)
        vs = w.versus(result, base, Limits(0.01), figure_time(r))
        return vs.throughput_ratio, trial_text(result, r, vs)

    live = {n: console(n, watch()) for n in (1, 2, 3)}  # each printed as it finished
    assert live[2][0] == pytest.approx(11873.0 / 6368.0)  # median of trial 0's 6,736/s and 6,000/s then
    later = [{"at": t[10] + 1, "throughput": 4900.0}, {"at": t[10] + 2, "throughput": 4900.0}]
    study.set_user_attr(BASELINE_MEASUREMENTS, study.user_attrs[BASELINE_MEASUREMENTS] + later)
    data = StudyData(open_storage(url), "digits_cnn-cpu")
    data.reload()
    shown = {r.number: r for r in data.rows}
    after = watch()
    for n in (1, 2, 3):
        ratio, line = live[n]
        assert shown[n].versus.throughput_ratio == pytest.approx(ratio), n  # the explorer: the console's figure
        assert f"{ratio:.2f}x the baseline" in line and shown[n].versus.cells()[0] == f"{ratio:.2f}x unconfirmed"
        assert console(n, after)[0] == pytest.approx(ratio)  # a resumed driver prints it the same
    fresh = TrialResult(ok=True, throughput=6000.0, peak_memory_bytes=100 * 2**20, score=0.96)
    assert after.versus(fresh, base, Limits(0.01), t[10] + 3).throughput_ratio == pytest.approx(6000.0 / 4900.0)


def test_a_figure_measured_before_a_disturbed_baseline_was_measured_again_keeps_trial_0s_reference(tmp_path):
    """Trial 0 turned out disturbed (its sentinel was off), so once the baseline is measured
    again trial 0 is no reference for what follows; a trial measured before that stays
    against trial 0's figure, the one reference the driver had when it printed it, however
    many measurements come later (never the later ones, whose median moves)."""
    from advisor.core.objectives import Limits
    from advisor.core.results import TrialResult, TrialSettings
    from advisor.core.stop import Stop
    from advisor.core.stored import BASELINE_DISTURBED, BASELINE_MEASUREMENTS, figure_time, read_study
    from advisor.study.confirmation.baseline_watch import BaselineWatch

    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = write_recorded_study(url)
    stored = read_study(study)
    base, three = stored.baseline, stored.records[3]
    result = TrialResult(ok=True, throughput=three.figures.throughput,
                         peak_memory_bytes=three.figures.peak_memory_bytes, score=three.figures.score)

    def live() -> float:
        watch = BaselineWatch(study, None, TrialSettings(train_samples=10), base.config, None, Stop(), lambda e: None)
        return watch.versus(result, base, Limits(0.01), figure_time(three)).throughput_ratio

    printed = live()
    assert printed == pytest.approx(10911.0 / 6736.0)
    last = max(figure_time(r) for r in stored.records)
    study.set_user_attr(BASELINE_DISTURBED, "the noise sentinel read 2.0x slower than the study's median")
    study.set_user_attr(BASELINE_MEASUREMENTS, [{"at": last + 1, "throughput": 3000.0}])
    assert live() == pytest.approx(printed)  # a driver resumed now: trial 0 is out, nothing by then
    study.set_user_attr(BASELINE_MEASUREMENTS, [{"at": last + i, "throughput": t}
                                                for i, t in ((1, 3000.0), (2, 6000.0), (3, 6100.0))])
    again = read_study(study)
    assert again.versus_baseline(again.records[3]).throughput_ratio == pytest.approx(printed)
    assert live() == pytest.approx(printed)
    assert again.reference_at(last + 4) == 6000.0  # a figure measured after them: their median, trial 0 left out


def test_detail_says_a_training_run_repeated_the_baselines(url):
    """A trial stored with ``trained_as`` (its training run repeated the baseline's) says so."""
    from dataclasses import replace

    from advisor.core.stored import SAME_RUN

    rows, data = _rows(url)
    row = replace(rows[2], record=replace(rows[2].record, attrs={**rows[2].record.attrs, SAME_RUN: 0}))
    text = str(describe(row, data.attrs, data.baseline.config))
    assert "its training run repeated trial 0's (same training numerics: judged as the baseline over its seeds)" in text
    assert "repeated trial" not in str(describe(rows[2], data.attrs, data.baseline.config))


def test_a_disturbed_baseline_reads_its_reference_in_the_explorer(url):
    """As in every table: the baseline's row shows the re-measured reference its ratios are
    to, not its disturbed first run; the detail pane says which it is."""
    import optuna

    from advisor.core.stored import BASELINE_DISTURBED, BASELINE_MEASUREMENTS

    study = optuna.load_study(study_name="digits_cnn-cpu", storage=url)
    last = max(t.datetime_complete.timestamp() for t in study.trials if t.datetime_complete)
    study.set_user_attr(BASELINE_MEASUREMENTS, [{"at": last + i, "throughput": v}
                                                for i, v in ((1, 7000.0), (2, 7100.0), (3, 7050.0))])
    rows, data = _rows(url)
    assert rows[0].throughput == rows[0].record.probe[0] == 6736.0  # its own run stands: shown as measured
    study.set_user_attr(BASELINE_DISTURBED, "its first run: the sentinel read 9x apart")
    rows, data = _rows(url)
    assert rows[0].throughput == 7050.0 and rows[3].throughput == rows[3].record.probe[0]
    assert [c[0] for c in TrialTable._figure_cells(rows[0])][1] == "7,050"
    text = str(describe(rows[0], data.attrs, data.baseline.config))
    assert "The baseline's first run was disturbed: its samples/s is the median of its latest re-measurements, " \
           "the reference the ratios are to: 7,050 samples/s" in text
