"""The explorer's screens."""

from tui.screens.filters import FilterScreen
from tui.screens.help import HelpScreen
from tui.screens.main import MainScreen
from tui.screens.studies import StudyListScreen

__all__ = ["FilterScreen", "HelpScreen", "MainScreen", "StudyListScreen"]
