"""One run of a study, from options to stored trials.

Public: ``plan`` (``plan_study``: every bad-input check before Ray starts; ``open_study``),
``tuner`` (``Tuner``: starts the executor, opens the run's context, runs its steps) and
``background`` (a study in a thread, for the live explorer).

Its own: ``_run_context`` (``RunContext``: what a run holds fixed once its study is open),
``_study_run`` (``StudyRun``: the driver loop's steps), ``_ledger`` (``Ledger``: the only
writer of the study's trials) with ``_trial_writes`` (where a trial ends), ``_parts``
(submit a part, collect it, have the ledger store it), ``_slots`` (what runs now),
``_training_queue`` (two-stage evaluation's decisions), ``_estimate`` (how long the rest
should take), ``_training_budget`` (the default training budget capped by time),
``_drivers`` (several drivers on one study) and ``_signals`` (Ctrl-C / SIGTERM).

Imports ``advisor.study.options``, ``advisor.study.storage`` and
``advisor.study.confirmation``."""

__all__ = ["background", "plan", "tuner"]
