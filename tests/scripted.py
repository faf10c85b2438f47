"""Stand-ins shared by the tests that drive study code with a scripted executor (named as
such: they replace only the executor's handle and the loaded model.py; the study code,
Optuna and SQLite are real)."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.core.results import TrialResult


@dataclass
class Handle:
    """What a scripted executor's ``submit`` returns: the result is known at once."""

    number: int
    submitted: float
    result: TrialResult


@dataclass
class Workload:
    """The loaded model.py as ``TrialPayload.of`` reads it."""

    path: str = "model.py"
    source: str = ""
    sha256: str = "0"
