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


STUDY_ATTRS = ("SELECT a.key, a.value_json FROM study_user_attributes a JOIN studies s ON s.study_id = a.study_id "
               "WHERE s.study_name = {}")


def _query(where: Path | str, study_name: str, *queries: str) -> list[list[tuple]] | None:
    """The rows of each of ``queries`` (their one parameter: the study's name), read in one
    connection; None while the database or its tables do not exist yet (or the server does
    not answer)."""
    if str(where).startswith("postgresql"):
        import psycopg

        try:
            url = str(where).replace("postgresql+psycopg://", "postgresql://")
            with psycopg.connect(url, connect_timeout=5) as con:
                return [con.execute(q.format("%s"), (study_name,)).fetchall() for q in queries]
        except psycopg.Error:  # down, or no tables yet
            return None
    if not Path(where).exists():
        return None
    try:
        with sqlite3.connect(f"file:{where}?mode=ro", uri=True, timeout=5) as con:
            return [con.execute(q.format("?"), (study_name,)).fetchall() for q in queries]
    except sqlite3.OperationalError:  # no tables yet
        return None


def peek_trials(where: Path | str, study_name: str) -> list[SimpleNamespace]:
    """Each trial as ``number``, ``state.name`` and ``user_attrs``, in number order; [] while
    the database or the study does not exist yet (or the server does not answer). ``where``:
    a SQLite file, or a ``postgresql+psycopg://`` URL."""
    found = _query(where, study_name, TRIALS, ATTRS)
    if found is None:
        return []
    rows, pairs = found
    attrs: dict[int, dict] = {trial_id: {} for trial_id, _, _ in rows}
    for trial_id, key, value in pairs:
        attrs.setdefault(trial_id, {})[key] = json.loads(value)
    return [SimpleNamespace(number=number, state=SimpleNamespace(name=state), user_attrs=attrs[trial_id])
            for trial_id, number, state in rows]


def peek_study_attrs(where: Path | str, study_name: str) -> dict:
    """The study's user attributes ({} as ``peek_trials``'s [])."""
    found = _query(where, study_name, STUDY_ATTRS)
    return {} if found is None else {key: json.loads(value) for key, value in found[0]}
