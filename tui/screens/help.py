"""The help screen: every key of the main screen, read from its bindings."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class HelpScreen(ModalScreen[None]):
    """Lists the keys; any of escape, q or ? closes it."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close", id="help.close")]

    def __init__(self, bindings: list[Binding]) -> None:
        super().__init__()
        self.keys = bindings

    def compose(self) -> ComposeResult:
        lines = ["[b]advisor — keys[/b]", ""]
        for b in self.keys:
            keys = " / ".join(k.replace("question_mark", "?") for k in b.key.split(","))
            lines.append(f"  [b]{keys:<14}[/b] {b.description}")
        lines += ["", "  up/down, pgup/pgdn  move through the trials",
                  "", "[dim]escape closes this screen[/dim]"]
        with Vertical(id="help-box"):
            yield Static("\n".join(lines), id="help-text")
