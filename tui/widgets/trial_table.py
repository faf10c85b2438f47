"""The table of trials: the Pareto front, all trials, or the failed ones."""

from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from advisor.core.metric import DEFAULT_METRIC, MetricSpec
from advisor.core.units import first_line, fmt_bytes, fmt_rate
from advisor.tui.data import TrialRow

FAILED_COLUMNS = ("trial", "outcome", "message", "configuration")


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

    def show(self, rows: list[TrialRow], failed_view: bool, keep: int | None = None) -> None:
        """Replace the rows, keeping the cursor on trial ``keep`` when it is still shown."""
        mode = FAILED_COLUMNS if failed_view else figure_columns(rows[0].metric if rows else DEFAULT_METRIC)
        if mode != self.mode:
            self.clear(columns=True)
            for name in mode:
                self.add_column(name, key=None if name == "vs base" else name)
            self.mode = mode
        else:
            self.clear()
        for row in rows:
            self.add_row(*(self._failed_cells(row) if failed_view else self._figure_cells(row)), key=str(row.number))
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

    @staticmethod
    def _figure_cells(row: TrialRow) -> list[object]:
        mark = " base" if row.baseline else (" *" if row.on_front else "")
        style = "bold" if row.on_front else ("dim" if row.state == "complete" and not row.feasible else "")
        if row.state == "probed":  # two-stage: speed and memory measured, no training run needed
            cells = row.versus.cells()
            return [Text(f"{row.number} p", justify="right", style="dim"),
                    Text(fmt_rate(row.throughput), justify="right", style="dim"), Text(cells[0], justify="right", style="dim"),
                    Text(fmt_bytes(row.memory), justify="right", style="dim"), Text(cells[1], justify="right", style="dim"),
                    Text("probed", justify="right", style="dim"), Text("not needed", justify="right", style="dim"),
                    Text(row.description, style="dim")]
        if row.state != "complete":
            return [Text(f"{row.number}", justify="right"), Text(row.failure or row.state, style="red"),
                    "", "", "", "", "", Text(row.description, style="red")]
        return [Text(f"{row.number}{mark}", justify="right", style=style),
                Text(fmt_rate(row.throughput), justify="right"), Text(row.versus.cells()[0], justify="right"),
                Text(fmt_bytes(row.memory), justify="right"), Text(row.versus.cells()[1], justify="right"),
                Text(row.metric.value_text(row.score), justify="right"),  # type: ignore[arg-type]
                Text(row.versus.metric_text(row.metric), justify="right"),
                Text(row.description, style=style)]

    @staticmethod
    def _failed_cells(row: TrialRow) -> list[object]:
        outcome = f"{row.failure}, skipped" if row.state == "skipped" else row.failure
        first = first_line(row.message, 100)
        return [Text(str(row.number), justify="right"), Text(outcome, style="red"), first[:100], row.description]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.post_message(self.Selected(int(event.row_key.value) if event.row_key.value is not None else None))
