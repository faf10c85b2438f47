"""advisor's figures in optuna-dashboard: its notes, written into the study's storage.

optuna-dashboard shows a Markdown note on a study's page and on each trial's, stored as
study system attributes (its ``save_note``; a finished trial's own attributes cannot
change, and confirmed ratios arrive after the trial is stored). ``write_notes`` rewrites
advisor's block of every note of a study from what is stored (``dashboard_notes``); a note
whose text would not change is not written, so writing twice writes nothing the second
time. ``DashboardNotes`` is a listener of a running study's events that does the same as
it goes (a stored trial's note, a confirmed trial's, the study's) and for the whole study
when it ends; ``advisor dashboard`` refreshes them and serves the dashboard.

The notes are written in optuna-dashboard's own format, with its own functions (the keys
``dashboard:note_ver`` / ``dashboard:note_str:N`` and per trial ``dashboard:<trial id>:...``,
the body cut into chunks, the version counted up as its editor does), so the dashboard's
editor sees a newer version and never overwrites advisor's text blindly.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.core.errors import AdvisorError, StorageError
from advisor.core.events import Event, Finished, Listener, Note, Paired, ignore
from advisor.core.stored import read_study
from advisor.core.units import first_line
from advisor.outputs.dashboard_notes import merge, notes
from advisor.study.storage.guard import shown_url

INSTALL = "pip install 'advisor[dashboard]' (or pip install optuna-dashboard)"


def note_api() -> Any:
    """optuna-dashboard's note module; AdvisorError (exit status 2) when it is not installed.

    Its ``_note`` module needs only Optuna, but importing it through the package runs
    ``optuna_dashboard/__init__.py``, which loads the whole web app and, through Optuna's
    importance code, scikit-learn and SciPy: about a second of every study's start (a
    driver writes the notes as trials finish). So the module's own file is loaded alone,
    once, unless the package is imported already (then its module is the one used)."""
    global _NOTE
    try:
        spec = importlib.util.find_spec("optuna_dashboard")  # finds the package without running it
    except (ImportError, ValueError) as exc:
        raise AdvisorError(f"optuna-dashboard is not installed ({first_line(exc, 200)}): {INSTALL}") from None
    if spec is None:
        raise AdvisorError(f"optuna-dashboard is not installed: {INSTALL}")
    loaded = sys.modules.get("optuna_dashboard._note")
    if loaded is not None:
        return loaded
    if _NOTE is None:
        found = [Path(p) / "_note.py" for p in spec.submodule_search_locations or ()]
        if found and found[0].is_file():
            alone = importlib.util.spec_from_file_location("advisor._optuna_dashboard_note", found[0])
            assert alone is not None and alone.loader is not None
            module = importlib.util.module_from_spec(alone)
            alone.loader.exec_module(module)
            _NOTE = module
        else:  # laid out otherwise (a later release): through the package, as it is meant to be imported
            try:
                from optuna_dashboard import _note
            except ImportError as exc:
                raise AdvisorError(f"optuna-dashboard is not installed ({first_line(exc, 200)}): {INSTALL}") from None
            _NOTE = _note
    return _NOTE


_NOTE: Any = None  # optuna-dashboard's _note module, loaded alone (note_api)


def installed() -> bool:
    try:
        note_api()
    except AdvisorError:
        return False
    return True


def written_by_advisor(study: Any) -> bool:
    """Whether advisor wrote ``study``: a storage may hold other Optuna studies, whose
    notes are left alone (``advisor.study.storage.stores.is_advisor_study``)."""
    from advisor.study.storage.stores import is_advisor_study

    return is_advisor_study(study)


@dataclass(frozen=True)
class Written:
    """What ``write_notes`` did to one study's notes."""

    study: str
    written: int  # notes written (new or changed)
    unchanged: int

    def text(self) -> str:
        return (f"study {self.study}: {self.written} note{'s' if self.written != 1 else ''} written, "
                f"{self.unchanged} unchanged")


def write_notes(study: Any, storage_url: str | None = None, trials: set[int] | None = None) -> Written:
    """Rewrite advisor's block of the notes of ``study`` (an ``optuna.Study``): the study's
    and every trial's (only those in ``trials`` when given); the user's own text around
    the block is kept. ``storage_url``: for the export commands in the study's note."""
    api = note_api()
    stored = read_study(study)
    blocks = notes(stored, shown_url(storage_url) if storage_url else None, trials)
    storage, study_id = study._storage, study._study_id
    ids = {t.number: t._trial_id for t in study.get_trials(deepcopy=False)}
    attrs = storage.get_study_system_attrs(study_id)  # every note at once: read once
    written = 0
    for number, block in blocks.items():
        trial_id = None if number is None else ids[number]
        current = api.get_note_from_system_attrs(attrs, trial_id)
        body = merge(current["body"], block)
        if body == current["body"]:
            continue
        _save(api, storage, study_id, trial_id, int(current["version"]) + 1, body, attrs)
        written += 1
    return Written(stored.name, written, len(blocks) - written)


def _save(api: Any, storage: Any, study_id: int, trial_id: int | None, version: int, body: str,
          attrs: dict[str, Any]) -> None:
    """optuna-dashboard's ``save_note_with_version``, without reading every note again per
    note: the chunks of the body, the old note's extra chunks emptied, then the version."""
    prefix = api.note_str_key_prefix(trial_id)
    chunks = api.split_body(body, trial_id)
    old = sum(1 for key in attrs if key.startswith(prefix))
    for i in range(len(chunks), old):
        chunks[f"{prefix}{i}"] = ""
    for key, text in chunks.items():
        storage.set_study_system_attr(study_id, key, text)
    storage.set_study_system_attr(study_id, api.note_ver_key(trial_id), version)


class DashboardNotes:
    """A listener that keeps a running study's notes current (nothing when optuna-dashboard
    is not installed: ``advisor dashboard`` writes them all later). A stored trial's note
    and the study's are written when the trial is stored, a trial's and the study's again
    when a confirmation pair lands; ``close()`` rewrites every note, once the front and
    the picks are final. It opens the study's storage itself, on the first event, without
    waiting for a database that does not answer: the study's own storage waits (a review saw
    an outage stop the study after twice ``$ADVISOR_STORAGE_WAIT``, the notes' wait first).
    A note that cannot be written never stops the study: a storage that does not answer
    skips that write (the next event writes again, ``close`` every note), anything else
    ends the notes; ``notify`` is told once either way."""

    def __init__(self, storage_url: str, study_name: str) -> None:
        self.url, self.name = storage_url, study_name
        self.active = installed()
        self.notify: Listener = ignore
        self._study: Any = None
        self._told = False

    def event(self, event: Event) -> None:
        if isinstance(event, Finished):
            self._write({event.number})
        elif isinstance(event, Paired):
            self._write({event.confirmation.trial})

    def close(self) -> None:
        self._write(None)
        self.active = False

    def _write(self, trials: set[int] | None) -> None:
        if not self.active:
            return
        try:
            if self._study is None:
                import optuna

                from advisor.study.storage import stores

                self._study = optuna.load_study(study_name=self.name,
                                                storage=stores.open_storage(self.url, must_exist=True, wait_s=0))
            write_notes(self._study, self.url, trials)
        except StorageError as exc:  # not answering now: the study's storage waits for it; these notes do not
            self._tell(f"optuna-dashboard notes: skipped while the storage does not answer ({first_line(exc, 200)}); "
                       "written again with the next trial, and all of them at the end")
        except Exception as exc:  # the storage gone, a format optuna-dashboard changed: the study goes on
            self.active = False
            self._tell(f"optuna-dashboard notes: not written ({type(exc).__name__}: {first_line(exc, 300)}); "
                       "`advisor dashboard` writes them later")

    def _tell(self, text: str) -> None:
        if not self._told:
            self._told = True
            self.notify(Note(text))
