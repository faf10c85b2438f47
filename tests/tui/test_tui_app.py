"""The explorer driven with Textual's Pilot on a recorded study in real SQLite storage:
rows, plot axes, views, sorting, filters, export and help."""

from __future__ import annotations

import pytest
import yaml
from explorer_pilot import loaded

import advisor
from advisor.cli.main import main
from advisor.core.errors import StudyError
from advisor.study.storage.stores import open_storage
from advisor.tui import make_app
from advisor.tui.screens import FilterScreen, HelpScreen, MainScreen, StudyListScreen
from advisor.tui.widgets import ScatterPlot, TrialDetail, TrialTable

from recorded_study import NAME, write_recorded_study


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    write_recorded_study(url)
    return url


def _table(app) -> TrialTable:
    return app.screen.query_one(TrialTable)


def _detail_text(app) -> str:
    return str(app.screen.query_one(TrialDetail).render())


async def test_rows_move_and_detail_follows(url, tmp_path):
    app = make_app(url, export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        assert isinstance(app.screen, MainScreen)
        table = _table(app)
        assert table.row_count == 7 and table.selected == 0
        assert "trial 0 (baseline)" in _detail_text(app)
        await pilot.press("down", "down")
        await pilot.pause()
        assert table.selected == 2
        text = _detail_text(app)
        assert "throughput 1.76x unconfirmed, memory 1.33x unconfirmed, accuracy -0.6 pt" in text
        assert "channels_last: false -> true" in text and "spread (IQR) 2.0%" in text and "AMD EPYC" in text


async def test_plot_axes_switch_and_never_coincide(url):
    app = make_app(url)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        screen = app.screen
        assert (screen.x_axis, screen.y_axis) == ("throughput", "memory")
        await pilot.press("y")
        assert screen.y_axis == "metric"
        await pilot.press("x", "x")
        assert screen.x_axis == "step_time"  # memory, then step_time
        await pilot.press("x", "x")
        assert screen.x_axis == "memory"  # throughput, then memory; the metric is taken by y
        await pilot.press("y")
        assert screen.y_axis == "step_time"
        await pilot.press("y", "y")
        assert screen.y_axis == "metric"  # throughput, metric; memory is x
        await pilot.pause()
        plot = screen.query_one(ScatterPlot)
        rendered = str(plot.render())
        assert "x: peak memory (MiB)" in rendered and "y: accuracy" in rendered


async def test_views_toggle_to_all_and_failed(url):
    app = make_app(url)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        await pilot.press("v")
        assert _table(app).row_count == 11
        await pilot.press("v")
        await pilot.pause()
        table = _table(app)
        assert table.row_count == 2
        assert [str(c.label) for c in table.columns.values()][:3] == ["trial", "outcome", "message"]
        assert "oom" in str(table.get_row_at(0)[1]) and "CUDA out of memory" in str(table.get_row_at(0)[2])
        assert "oom: CUDA out of memory" in _detail_text(app)
        await pilot.press("v")
        assert _table(app).row_count == 7


async def test_sort_and_reverse(url):
    app = make_app(url)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        await pilot.press("s", "r")  # throughput, descending
        await pilot.pause()
        table = _table(app)
        firsts = [str(table.get_row_at(i)[0]).strip() for i in range(3)]
        assert firsts == ["2 *", "3 *", "1 *"]
        assert "sort throughput desc" in str(app.screen.query_one("#status").render())


async def test_filter_dialog_applies_validates_and_clears(url):
    app = make_app(url)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        await pilot.press("f")
        await pilot.pause()
        assert isinstance(app.screen, FilterScreen)
        await pilot.click("#memory-cap")
        await pilot.press(*"lots", "enter")
        await pilot.pause()
        assert isinstance(app.screen, FilterScreen)  # refused, with the reason
        assert "is not a size" in str(app.screen.query_one("#filter-error").render())
        app.screen.query_one("#memory-cap").value = "110MiB"
        app.screen.query_one("#max-drop").value = "0"
        await pilot.click("#max-drop")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert [str(_table(app).get_row_at(i)[0]).strip() for i in range(_table(app).row_count)] == [
            "0 base", "4 *", "7 *", "10 *"]
        assert app.screen.has_class("filtered")
        await pilot.press("c")
        await pilot.pause()
        assert _table(app).row_count == 7 and not app.screen.has_class("filtered")


async def test_export_writes_a_loadable_config(url, tmp_path):
    app = make_app(url, export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        await pilot.press("down", "down", "e")
        await pilot.pause()
        path = tmp_path / f"{NAME}-trial2.yaml"
        assert app.exported == [path]
        config = advisor.load_config(path)
        assert config.batch_size == 256 and config.channels_last
        assert yaml.safe_load(path.read_text())["source"]["trial"] == 2
        await pilot.press("v", "v", "e")  # a failed trial: told, nothing written
        await pilot.pause()
        assert app.exported == [path]
        assert not (tmp_path / f"{NAME}-trial8.yaml").exists()


async def test_help_lists_every_key(url):
    app = make_app(url)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one("#help-text").render())
        for binding in MainScreen.BINDINGS:
            assert binding.description in text
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


def test_every_binding_has_an_id():
    from advisor.tui.app import AdvisorApp

    for owner in (MainScreen, HelpScreen, FilterScreen, StudyListScreen, AdvisorApp):
        assert all(b.id for b in owner.BINDINGS), owner


async def test_several_studies_open_a_list(url, tmp_path):
    write_recorded_study(url, name="second")
    app = make_app(url)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        assert isinstance(app.screen, StudyListScreen)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen) and app.screen.data.name == "second"


def test_bad_storage_and_study_are_refused_before_the_app_starts(url, tmp_path, capsys):
    with pytest.raises(StudyError, match="no study named 'nope'"):
        make_app(url, "nope")
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    open_storage(empty)  # creates the schema, no study
    assert main(["tui", "--storage", empty]) == 2
    assert "holds no study yet" in capsys.readouterr().err
    assert main(["tui", "--storage", f"sqlite:///{tmp_path / 'missing.db'}"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()
    assert main(["tui", "--storage", url, "--export-dir", str(tmp_path / "nowhere")]) == 2


async def test_a_study_written_by_the_first_version_opens_without_migration(tmp_path):
    """Configs stored with only the first version's knobs: shown with today's defaults."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    write_recorded_study(url, old_format=True)
    app = make_app(url, export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        await pilot.press("down", "down")
        await pilot.pause()
        assert _table(app).row_count == 7
        text = _detail_text(app)
        assert "channels_last: false -> true" in text and "grad_accumulation=1" in text  # filled with today's default
        await pilot.press("e")
        await pilot.pause()
        assert advisor.load_config(tmp_path / f"{NAME}-trial2.yaml").grad_accumulation == 1
