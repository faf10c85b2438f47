"""The study list, shown when a storage holds several studies and none was named."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option


class StudyListScreen(Screen[None]):
    """Pick a study; enter opens it."""

    BINDINGS = [Binding("q", "app.quit", "quit", id="studies.quit")]

    def __init__(self, summaries: list[Any]) -> None:
        super().__init__()
        self.summaries = summaries

    def compose(self) -> ComposeResult:
        yield Static(f"{len(self.summaries)} studies in this storage — choose one (enter)", id="status")
        yield OptionList(*[Option(f"{s.study_name:32s} {s.n_trials:4d} trials  "
                                  f"{s.user_attrs.get('workload_path', '?')}", id=s.study_name)
                           for s in self.summaries], id="studies")
        yield Footer()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        from advisor.tui.screens.main import MainScreen

        self.app.push_screen(MainScreen(str(event.option.id)))
