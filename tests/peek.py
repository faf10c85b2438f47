"""A light look at a study while another process writes it (SQLite or PostgreSQL): the
trials' numbers, states and user attributes read with plain SQL from Optuna's tables, in
milliseconds, for tests that poll a study many times a second. ``optuna.load_study`` costs
about 45 ms of CPU a call here: polled at 50 Hz it kept one of this machine's two cores busy
and slowed the driver under test."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

TRIALS = ("SELECT t.trial_id, t.number, t.state FROM trials t JOIN studies s ON s.study_id = t.study_id "
          "WHERE s.study_name = {} ORDER BY t.number")
ATTRS = ("SELECT a.trial_id, a.key, a.value_json FROM trial_user_attributes a JOIN trials t ON t.trial_id = a.trial_id "
         "JOIN studies s ON s.study_id = t.study_id WHERE s.study_name = {}")


def peek_trials(where: Path | str, study_name: str) -> list[SimpleNamespace]:
    """Each trial as ``number``, ``state.name`` and ``user_attrs``, in number order; [] while
    the database or the study does not exist yet (or the server does not answer). ``where``:
    a SQLite file, or a ``postgresql+psycopg://`` URL."""
    if str(where).startswith("postgresql"):
        import psycopg

        try:
            url = str(where).replace("postgresql+psycopg://", "postgresql://")
            with psycopg.connect(url, connect_timeout=5) as con:
                rows = con.execute(TRIALS.format("%s"), (study_name,)).fetchall()
                pairs = con.execute(ATTRS.format("%s"), (study_name,)).fetchall()
        except psycopg.Error:  # down, or no tables yet
            return []
    else:
        if not Path(where).exists():
            return []
        try:
            with sqlite3.connect(f"file:{where}?mode=ro", uri=True, timeout=5) as con:
                rows = con.execute(TRIALS.format("?"), (study_name,)).fetchall()
                pairs = con.execute(ATTRS.format("?"), (study_name,)).fetchall()
        except sqlite3.OperationalError:  # no tables yet
            return []
    attrs: dict[int, dict] = {trial_id: {} for trial_id, _, _ in rows}
    for trial_id, key, value in pairs:
        attrs.setdefault(trial_id, {})[key] = json.loads(value)
    return [SimpleNamespace(number=number, state=SimpleNamespace(name=state), user_attrs=attrs[trial_id])
            for trial_id, number, state in rows]
