"""advisor's terminal explorer (Textual). Imports advisor; advisor never imports it."""

from tui.app import AdvisorApp, make_app

__all__ = ["AdvisorApp", "make_app"]
