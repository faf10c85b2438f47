"""The driver: one study from options to a stored result. Only this side talks to
Optuna storage; trials return plain results.

- ``options``: ``TuneOptions`` (what ``advisor tune`` was asked) and their validation;
- ``plan``: ``plan_study``: everything that can fail on bad input, checked before Ray
  starts (model.py, its preflight, the space, the hardware, the storage); ``open_study``
  creates or resumes the study;
- ``storage``: storage URLs, opening, finding a study by name;
- ``tuner``: ``Tuner``: starts the executor, opens the run (``run_context``) and runs its
  steps (``study_run``), the driver loop: the baseline, then proposals run until the
  budget is spent, every result stored and reported as an event;
- ``background``: a study run in a thread, for a UI that watches it.
"""
