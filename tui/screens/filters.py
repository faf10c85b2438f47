"""The filter dialog: the largest drop of the study's metric, and a memory cap."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from advisor.core.errors import AdvisorError
from advisor.core.metric import DEFAULT_METRIC, MetricSpec
from advisor.core.units import parse_size
from advisor.tui.data import Filters


class FilterScreen(ModalScreen[Filters | None]):
    """Two inputs; enter applies (empty = no limit), escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "cancel", id="filters.cancel")]

    def __init__(self, current: Filters, metric: MetricSpec = DEFAULT_METRIC) -> None:
        super().__init__()
        self.current, self.metric = current, metric

    def compose(self) -> ComposeResult:
        c = self.current
        with Vertical(id="filter-box"):
            m = self.metric
            unit = "in points (e.g. 0.5" if m.fraction else f"as an amount of it{f' in {m.unit}' if m.unit else ''} (e.g. 0.05"
            yield Label(f"largest {m.name} drop vs the baseline ({m.direction_word}), {unit}; empty: no limit)"
                        if m != DEFAULT_METRIC else "largest accuracy drop vs the baseline, in points (e.g. 0.5; empty: no limit)")
            yield Input("" if c.max_drop_pt is None else f"{c.max_drop_pt:g}", id="max-drop")
            yield Label("memory cap (e.g. 120MiB, 2GiB; empty: no cap)")
            yield Input("" if c.memory_cap is None else f"{int(c.memory_cap)}", id="memory-cap")
            yield Static("", id="filter-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        drop_text = self.query_one("#max-drop", Input).value.strip()
        cap_text = self.query_one("#memory-cap", Input).value.strip()
        try:
            drop = float(drop_text) if drop_text else None
            if drop is not None and not drop >= 0:
                raise ValueError
        except ValueError:
            self.query_one("#filter-error", Static).update(f"{self.metric.name} drop: expected a number >= 0, "
                                                           f"found {drop_text!r}")
            return
        try:
            cap = parse_size(cap_text, what="memory cap") if cap_text else None
        except AdvisorError as exc:
            self.query_one("#filter-error", Static).update(str(exc))
            return
        self.dismiss(Filters(max_drop_pt=drop, memory_cap=cap))

    def action_cancel(self) -> None:
        self.dismiss(None)
