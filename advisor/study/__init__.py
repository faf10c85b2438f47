"""The driver: one study from options to a stored result. Only this side talks to
Optuna storage; trials return plain results.

Its subpackages, each importing only those listed before it (``tests/test_layers.py``
checks that they form no circle):

- ``options``: ``TuneOptions``, the one definition of what a study is asked, and each
  option's ``Option`` declaration;
- ``storage``: Optuna storage: URLs, opening, finding a study by name, and the guard
  every RDB call goes through;
- ``confirmation``: the metric's noise and the baseline watched while the study runs,
  the front's undecided candidates trained with more seeds, paired confirmation;
- ``run``: one run of a study: ``plan_study`` (every bad-input check before Ray starts),
  the ``Tuner`` and its steps, the parts, slots, training queue, the ledger (the only
  writer of the study's trials), several drivers on one study, a study in a thread;
- ``doctor``: ``advisor doctor``.

Each subpackage's ``__all__`` names the modules other packages may import; the others
start with an underscore and are its own.
"""

__all__ = ["confirmation", "doctor", "options", "run", "storage"]
