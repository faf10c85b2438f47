"""The main screen: status line, trial table, scatter plot and detail pane."""

from __future__ import annotations

import time
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, ProgressBar, Static
from textual.worker import Worker, WorkerState

from advisor.core.events import (
    Cancelled,
    Duplicate,
    Event,
    Finished,
    Note,
    Paired,
    Skipped,
    Started,
    Stopped,
    TimeLimit,
)
from advisor.core.metric import DEFAULT_METRIC
from advisor.tui.data import AXES, SORT_KEYS, VIEW_TITLES, VIEWS, Filters, Loaded, StudyData
from advisor.tui.widgets import ScatterPlot, TrialDetail, TrialTable


def _next(options: tuple[str, ...] | list[str], current: str, skip: str | None = None) -> str:
    i = options.index(current)
    for step in range(1, len(options) + 1):
        candidate = options[(i + step) % len(options)]
        if candidate != skip:
            return candidate
    return current


class MainScreen(Screen[None]):
    """One study: its trials, a plot of two figures, and the selected trial in detail."""

    BINDINGS = [
        Binding("v", "cycle_view", "view", id="main.view"),
        Binding("x", "cycle_x", "x axis", id="main.x_axis"),
        Binding("y", "cycle_y", "y axis", id="main.y_axis"),
        Binding("s", "cycle_sort", "sort", id="main.sort"),
        Binding("r", "reverse_sort", "reverse", id="main.reverse"),
        Binding("f", "filters", "filter", id="main.filters"),
        Binding("c", "clear_filters", "clear filters", show=False, id="main.clear_filters"),
        Binding("e", "export", "export", id="main.export"),
        Binding("u", "reload", "reload", show=False, id="main.reload"),
        Binding("question_mark", "help", "help", id="main.help"),
        Binding("q", "app.quit", "quit", id="main.quit"),
    ]

    def __init__(self, study_name: str) -> None:
        super().__init__()
        self.data: StudyData = StudyData(self.app.storage, study_name)  # type: ignore[attr-defined]
        self.view, self.sort, self.reverse = "front", "trial", False
        self.x_axis, self.y_axis = "throughput", "memory"
        self.selected: int | None = None
        self.loading = False  # a read of the storage is in flight (in a worker thread)
        self._again = False  # something changed during that read: read once more after it
        self.limit: TimeLimit | None = None  # a live study's --budget or --timeout: the time left is shown
        self.clock = time.monotonic  # the TimeLimit's clock
        self._eta = ""  # the live line's text, before the time left

    def compose(self) -> ComposeResult:
        yield Static(id="status")
        with Horizontal(id="live", classes="hidden"):
            yield ProgressBar(id="progress", show_eta=False)
            yield Static(id="eta")
        with Horizontal(id="body"):
            yield TrialTable(id="table")
            with Vertical(id="side"):
                yield ScatterPlot(id="plot")
                yield TrialDetail(id="detail")
        yield Footer()

    def on_mount(self) -> None:
        live = getattr(self.app, "live", None)
        if live is not None:
            self.query_one("#live").remove_class("hidden")
            self.query_one("#progress", ProgressBar).update(total=live.total, progress=0)
            self.set_interval(1.0, self.show_eta)  # the time left moves between events too
        self.query_one("#status", Static).update(f"[b]{self.data.name}[/b] · reading the study…")
        self.refresh_data()
        self.query_one(TrialTable).focus()

    def on_resize(self) -> None:
        self.set_class(self.size.width < 160, "stacked")

    # ---- data ------------------------------------------------------------------------
    def refresh_data(self) -> None:
        """Read what changed in storage, in a worker thread; the screen updates when it is
        in. Requests during a read are coalesced into one more read after it."""
        if self.loading:
            self._again = True
            return
        self.loading, self._again = True, False
        self._read()

    @work(thread=True, group="load", exit_on_error=False)
    def _read(self) -> Loaded:
        return self.data.read()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if worker.group != "load" or not worker.is_finished:
            return
        self.loading = False
        if event.state == WorkerState.SUCCESS and isinstance(worker.result, Loaded):
            self.data.apply(worker.result)
            self.render_view()
        elif event.state == WorkerState.ERROR:
            self.notify(f"{type(worker.error).__name__}: {worker.error}", title="storage not read",
                        severity="error", timeout=8)
        if self._again:
            self.refresh_data()

    def render_view(self) -> None:
        rows = self.data.view(self.view, self.sort, self.reverse)
        self.query_one(TrialTable).show(rows, failed_view=self.view == "failed", keep=self.selected)
        self.update_status(len(rows))
        self.draw()

    def update_status(self, shown: int) -> None:
        c = self.data.counts()
        direction = "desc" if self.reverse else "asc"
        metric = self.data.study.metric if self.data.study is not None else DEFAULT_METRIC
        parts = [f"[b]{self.data.name}[/b]", f"{VIEW_TITLES[self.view]}: {shown} shown",
                 f"{c['complete']} completed, " + (f"{c['probed']} probed only, " if c["probed"] else "")
                 + f"{c['failed']} failed, {c['infeasible']} infeasible, {c['skipped']} skipped",
                 f"sort {metric.name if self.sort == 'metric' else self.sort} {direction}"]
        if self.data.filters.describe(metric):
            parts.append(f"[yellow]filter: {self.data.filters.describe(metric)}[/yellow]")
        self.query_one("#status", Static).update(" · ".join(parts))
        self.set_class(bool(self.data.filters.describe(metric)), "filtered")

    def draw(self) -> None:
        self.query_one(ScatterPlot).draw(self.data.rows, self.x_axis, self.y_axis, self.selected)
        row = next((r for r in self.data.rows if r.number == self.selected), None)
        base = self.data.baseline
        self.query_one(TrialDetail).show(row, self.data.attrs, base.config if base is not None else None)

    @on(TrialTable.Selected)
    def _selected(self, event: TrialTable.Selected) -> None:
        if event.number != self.selected:
            self.selected = event.number
            self.draw()

    # ---- actions ---------------------------------------------------------------------
    def action_cycle_view(self) -> None:
        self.view = _next(VIEWS, self.view)
        self.render_view()

    def action_cycle_x(self) -> None:
        self.x_axis = _next(list(AXES), self.x_axis, skip=self.y_axis)
        self.draw()

    def action_cycle_y(self) -> None:
        self.y_axis = _next(list(AXES), self.y_axis, skip=self.x_axis)
        self.draw()

    def action_cycle_sort(self) -> None:
        self.sort = _next(SORT_KEYS, self.sort)
        self.render_view()

    def action_reverse_sort(self) -> None:
        self.reverse = not self.reverse
        self.render_view()

    def action_filters(self) -> None:
        from advisor.tui.screens.filters import FilterScreen

        def done(filters: Filters | None) -> None:
            if filters is not None:
                self.data.set_filters(filters)
                self.render_view()

        metric = self.data.study.metric if self.data.study is not None else DEFAULT_METRIC
        self.app.push_screen(FilterScreen(self.data.filters, metric), done)

    def action_clear_filters(self) -> None:
        self.data.set_filters(Filters())
        self.render_view()

    def action_reload(self) -> None:
        self.refresh_data()

    def action_help(self) -> None:
        from advisor.tui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen([b for b in self.BINDINGS if isinstance(b, Binding)]))

    def action_export(self) -> None:
        """Write the selected trial's config with the CLI's export code, and say where: from
        the study as last read (what the screen shows), without reading storage."""
        from advisor.core.errors import AdvisorError
        from advisor.outputs.export import export_document, trial_by_number, write_export

        study = self.data.study
        if self.selected is None or study is None:
            self.notify("no trial selected", severity="warning")
            return
        path = Path(self.app.export_dir) / f"{self.data.name}-trial{self.selected}.yaml"  # type: ignore[attr-defined]
        try:
            write_export(export_document(study, trial_by_number(study, self.selected)), path)
        except AdvisorError as exc:
            self.notify(str(exc), title="not exported", severity="error", timeout=8)
            return
        self.notify(f"wrote {path}\napply it: advisor.apply(model, advisor.load_config({str(path)!r}))",
                    title=f"trial {self.selected} exported", timeout=10)
        self.app.exported.append(path)  # type: ignore[attr-defined]

    # ---- live ------------------------------------------------------------------------
    def live_event(self, event: Event) -> None:
        live = self.app.live  # type: ignore[attr-defined]
        if isinstance(event, (Finished, Skipped, Duplicate, Cancelled, Paired, Stopped, Started)):
            self.refresh_data()  # a pair of confirmation changes the ratios and maybe the front
        bar = self.query_one("#progress", ProgressBar)
        bar.update(total=live.total, progress=min(live.done, live.total))
        if isinstance(event, TimeLimit):
            self.limit = event
        if isinstance(event, Stopped):
            outcome = event.error or event.reason or "finished"
            self._eta = f" study stopped: {outcome} — e exports, q quits"
            self.limit = None  # the time is no longer counting
            self.set_class(True, "done")
        elif isinstance(event, Paired):
            c = event.confirmation
            self._eta = (f" {live.done}/{live.total} trials · confirming trial {c.trial} in pairs: "
                         + (c.throughput.text() if c.throughput is not None else c.note or c.status))
        elif not isinstance(event, TimeLimit):
            remaining = live.eta_s()
            self._eta = (f" {live.done}/{live.total} trials" + (f", about {remaining:.0f} s left" if remaining else "")
                         + (f" · {event.text}" if isinstance(event, Note) else ""))
        self.show_eta()

    def show_eta(self) -> None:
        """The live line: progress, the latest news, and with a time limit the time elapsed and left."""
        clock = f" · {self.limit.text(self.clock(), with_flag=True)}" if self.limit is not None else ""
        self.query_one("#eta", Static).update(self._eta + clock)
