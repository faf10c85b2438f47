"""Optuna storage: ``stores`` (storage URLs, opening, finding a study by name) and
``guard`` (an RDB storage that rides out a database restart; a token makes trial creation
idempotent). Reading trials back is ``advisor.core.stored``; writing them is the ledger's
(``advisor.study.run``). Imports nothing else of ``advisor.study``."""

__all__ = ["guard", "stores"]
