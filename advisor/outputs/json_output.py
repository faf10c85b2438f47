"""Every JSON document the CLI prints (``--json``) names its kind and format version
first: ``{"format": "advisor.<kind>/<version>", ...}``. A reader checks the kind and
refuses a version it does not know; a change that drops or renames a key bumps that
kind's version here (adding keys does not).

The kinds and their versions are listed in one place, ``VERSIONS``.
"""

from __future__ import annotations

import json
from typing import Any

FORMAT_KEY = "format"

VERSIONS = {
    "tune": 2,  # advisor tune --json: the summary (counts, timing, the front; 2: a row's "accuracy" is "score")
    "confirm": 1,  # advisor confirm --json: the confirmations
    "hardware": 1,  # advisor hardware --json: the fingerprint and every option, offered or refused
    "doctor": 1,  # advisor doctor --json: each option's run on each model
    "spaces": 1,  # advisor spaces --json: the shipped presets
    "space": 1,  # advisor spaces NAME --json: one space filtered for this machine
    "export": 2,  # advisor export --json: the export document (and its own advisor_config 2: measured.score)
    "measure": 2,  # advisor measure --json: the comparison (2: figures.score, was figures.accuracy)
    "report": 3,  # advisor report --json: the report's files and figures (2: the pick most-accurate is
    # best-metric; 3: a front row's "accuracy" is "score")
    "studies": 1,  # advisor studies --json: the studies in a storage
    "trials": 2,  # advisor trials --json: the trials of one study (2: vs_baseline's metric_* keys)
}


def format_tag(kind: str) -> str:
    """'advisor.tune/1' for ``kind`` 'tune' (a KeyError for a kind not in ``VERSIONS``)."""
    return f"advisor.{kind}/{VERSIONS[kind]}"


def json_document(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its format tag as the first key."""
    return {FORMAT_KEY: format_tag(kind), **{k: v for k, v in body.items() if k != FORMAT_KEY}}


def print_json(kind: str, body: dict[str, Any]) -> None:
    """Print the tagged document on stdout (which then holds nothing else)."""
    print(json.dumps(json_document(kind, body), indent=2), flush=True)
