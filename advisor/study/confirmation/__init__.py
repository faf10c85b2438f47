"""What a study measures beyond one run per configuration: ``baseline_watch`` (the
metric's noise, disturbed trials run again, the baseline re-measured), ``more_seeds``
(the front's undecided candidates trained with the baseline's other seeds), ``pairing``
(rounds A C… A, each with baseline runs of its own) and ``confirm`` (paired
confirmation, each run a sitting; ``advisor confirm``). Imports ``advisor.study.options``
and nothing else of ``advisor.study``."""

__all__ = ["baseline_watch", "confirm", "more_seeds", "pairing"]
