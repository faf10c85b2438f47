"""The explorer's screens."""

from advisor.tui.screens.filters import FilterScreen
from advisor.tui.screens.help import HelpScreen
from advisor.tui.screens.main import MainScreen
from advisor.tui.screens.studies import StudyListScreen

__all__ = ["FilterScreen", "HelpScreen", "MainScreen", "StudyListScreen"]
