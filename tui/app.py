"""The Textual app and ``make_app``, the one factory used by the CLI and the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from textual.app import App
from textual.binding import Binding
from textual.message import Message

from advisor.core.errors import StudyError
from advisor.core.events import Event, Started, Stopped
from advisor.tui.screens import MainScreen, StudyListScreen


class LiveRun(Protocol):
    """A study running in the background (``advisor tune`` with the explorer attached)."""

    total: int
    done: int
    storage: Any  # None until the study is open
    running: bool

    def start(self, on_event: Any) -> None: ...
    def stop(self, reason: str) -> None: ...
    def eta_s(self) -> float | None: ...


class AdvisorApp(App[None]):
    """Explore a stored study, or watch one being run."""

    CSS_PATH = "advisor.tcss"
    TITLE = "advisor"
    BINDINGS = [Binding("ctrl+c", "quit", "quit", show=False, priority=True, id="app.quit")]

    class TuneEvent(Message):
        """The background study reported something (a trial finished, it stopped, ...)."""

        def __init__(self, event: Event) -> None:
            super().__init__()
            self.event = event

    def __init__(self, storage: Any, study: str | None, summaries: list[Any], live: LiveRun | None = None,
                 export_dir: str | Path = ".") -> None:
        super().__init__()
        self.storage, self.study_name, self.summaries = storage, study, summaries
        self.live, self.export_dir = live, Path(export_dir)
        self.exported: list[Path] = []

    def on_mount(self) -> None:
        if self.study_name is not None:
            self.push_screen(MainScreen(self.study_name))
        else:
            self.push_screen(StudyListScreen(self.summaries))
        if self.live is not None:
            self.live.start(self._from_tuner)

    def _from_tuner(self, event: Event) -> None:
        """Called in the tuner's thread: hand the event to the UI thread."""
        try:
            self.post_message(self.TuneEvent(event))
        except RuntimeError:
            pass  # the app has closed; the CLI prints the summary

    def on_advisor_app_tune_event(self, message: TuneEvent) -> None:
        event = message.event
        if isinstance(event, Started) and self.live is not None:
            self.storage = self.live.storage
        for screen in self.screen_stack:
            if isinstance(screen, MainScreen):
                screen.data.storage = self.storage
                screen.live_event(event)
        if isinstance(event, Stopped) and event.error:
            self.exit()  # the CLI prints the error

    async def action_quit(self) -> None:
        if self.live is not None and self.live.running:
            self.live.stop("interrupted by the user (quit from the explorer)")
        self.exit()


def make_app(storage_url: str | None = None, study: str | None = None, live: LiveRun | None = None,
             export_dir: str | Path = ".") -> AdvisorApp:
    """Build the explorer for ``study`` in ``storage_url`` (default as for the CLI).

    Bad input is refused here, before any screen opens: a missing storage file, a storage
    without studies, an unknown study name (``advisor.core.errors.StudyError``). With ``live``,
    the study may not exist yet: it appears when the tuner creates it.

    Example:
        >>> make_app("sqlite:///advisor.db", "digits_cnn-default").run()  # doctest: +SKIP
    """
    import optuna

    from advisor.study.storage import stores

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = stores.storage_url(storage_url)
    if live is not None:  # the tuner opens (and may create) the storage; the screen follows
        if study is None:
            raise StudyError("a live explorer needs the study name")
        return AdvisorApp(None, study, [], live=live, export_dir=export_dir)
    storage = stores.open_storage(url, must_exist=True)
    summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
    if study is not None or len(summaries) <= 1:
        study = stores.find_study(storage, study, url)  # an empty storage or an unknown name is refused
    return AdvisorApp(storage, study, summaries, export_dir=export_dir)
