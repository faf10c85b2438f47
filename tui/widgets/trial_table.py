"""The table of trials: the Pareto front, all trials, or the failed ones. Its columns fit
the table's width: where the content is wider, the text columns are clipped at word
boundaries ('1.52x …'); the detail pane has the whole text."""

from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from advisor.core.caveats import mark as caveat_mark
from advisor.core.metric import DEFAULT_METRIC, MetricSpec
from advisor.core.units import first_line, fmt_bytes, fmt_rate
from advisor.tui.cells import fit_cells
from advisor.tui.data import TrialRow

FAILED_COLUMNS = ("trial", "outcome", "message", "configuration")
FAILED_SHRINKABLE = (False, False, True, True)
FIGURE_SHRINKABLE = (False, False, True, False, True, False, True, True)  # ratios, the metric's delta, configuration
Cell = tuple[str, str, str]  # text, style, justify


def figure_columns(metric: MetricSpec) -> tuple[str, ...]:
    """The figure view's columns, the metric's two by its name."""
    return ("trial", "samples/s", "vs base", "memory", "vs base", metric.name, metric.delta_header, "configuration")


class TrialTable(DataTable):
    """Rows of trials; posts ``TrialTable.Selected`` when the cursor moves to one."""

    class Selected(Message):
        """The cursor moved to the row of trial ``number`` (None: the table is empty)."""

        def __init__(self, number: int | None) -> None:
            super().__init__()
            self.number = number

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.mode: tuple[str, ...] = ()
        self.shown: tuple[list[TrialRow], bool] = ([], False)
        self.fitted_to = 0  # the width the cells were fitted to (0: not laid out yet, not fitted)

    def show(self, rows: list[TrialRow], failed_view: bool, keep: int | None = None) -> None:
        """Replace the rows, keeping the cursor on trial ``keep`` when it is still shown."""
        self.shown = (rows, failed_view)
        mode = FAILED_COLUMNS if failed_view else figure_columns(rows[0].metric if rows else DEFAULT_METRIC)
        self.clear(columns=True)  # columns again too: a column's width only ever grows with its cells
        for name in mode:
            self.add_column(name, key=None if name == "vs base" else name)
        self.mode = mode
        cells = [self._failed_cells(row) if failed_view else self._figure_cells(row) for row in rows]
        self.fitted_to = self.size.width - 2  # room for the vertical scrollbar
        if self.fitted_to > 0:
            texts = fit_cells(mode, [[c[0] for c in row] for row in cells],
                              FAILED_SHRINKABLE if failed_view else FIGURE_SHRINKABLE, self.fitted_to)
            cells = [[(t, style, justify) for t, (_, style, justify) in zip(r, row)] for r, row in zip(texts, cells)]
        for row, row_cells in zip(rows, cells):
            self.add_row(*(Text(t, style=style, justify=justify) for t, style, justify in row_cells),  # type: ignore[arg-type]
                         key=str(row.number))
        if self.row_count:
            known = keep is not None and str(keep) in self.rows
            self.move_cursor(row=self.get_row_index(str(keep)) if known else 0, animate=False)
        self.post_message(self.Selected(self.selected))

    @property
    def selected(self) -> int | None:
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        return int(key) if key is not None else None

    def on_resize(self) -> None:
        if self.size.width - 2 != self.fitted_to and self.mode:
            self.show(*self.shown, keep=self.selected)

    @staticmethod
    def _figure_cells(row: TrialRow) -> list[Cell]:
        mark = " base" if row.baseline else (" *" if row.on_front else "")
        style = "bold" if row.on_front else ("dim" if row.state == "complete" and not row.feasible else "")
        # " (busy)", " (unsettled)": its speed is less sure than the rest's (the detail pane says by how much)
        rate = fmt_rate(row.throughput) + ("" if row.reference is not None else caveat_mark(row.record.caveats))
        if row.state == "probed":  # two-stage: speed and memory measured, no training run needed
            ratios = row.versus.cells()
            texts = [f"{row.number} p", rate, ratios[0], fmt_bytes(row.memory), ratios[1],
                     "probed", "not needed"]
            return [(t, "dim", "right") for t in texts] + [(row.description, "dim", "left")]
        if row.state != "complete":
            return [(f"{row.number}", "", "right"), (row.failure or row.state, "red", "left"),
                    *[("", "", "left")] * 5, (row.description, "red", "left")]
        ratios = row.versus.cells()
        return [(f"{row.number}{mark}", style, "right"), (rate, "", "right"),
                (ratios[0], "", "right"), (fmt_bytes(row.memory), "", "right"), (ratios[1], "", "right"),
                (row.metric.value_text(row.score), "", "right"),  # type: ignore[arg-type]
                (row.versus.metric_text(row.metric), "", "right"), (row.description, style, "left")]

    @staticmethod
    def _failed_cells(row: TrialRow) -> list[Cell]:
        outcome = f"{row.failure}, skipped" if row.state == "skipped" else row.failure
        return [(str(row.number), "", "right"), (outcome, "red", "left"), (first_line(row.message, 100), "", "left"),
                (row.description, "", "left")]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.post_message(self.Selected(int(event.row_key.value) if event.row_key.value is not None else None))
