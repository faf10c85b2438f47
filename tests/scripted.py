"""Stand-ins shared by the tests that drive study code with a scripted executor (named as
such: they replace only the executor's handle and the loaded model.py; the study code,
Optuna and SQLite are real)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def ledger_study(folder: Path, space: Any, name: str, **create: Any) -> tuple[Any, Any]:
    """A real SQLite study in ``folder`` and the ledger that writes it (the baseline bs=32,
    an allowed drop of 0.01), for study code driven by scripted results."""
    import optuna

    from advisor.core.config import TrialConfig
    from advisor.core.objectives import Limits
    from advisor.search.strategy import Strategy
    from advisor.study.run._ledger import Ledger

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=f"sqlite:///{folder / 's.db'}", study_name=name,
                                directions=["maximize", "minimize", "maximize"], **create)
    study.set_user_attr("max_accuracy_drop", 0.01)
    ledger = Ledger(study, Strategy(space, TrialConfig(batch_size=32), workload="train", sampler="random", budget=5,
                                    limits=Limits(0.01)), Limits(0.01))
    return study, ledger
