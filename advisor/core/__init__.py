"""The bottom layer: plain data and rules every other package shares. Imports nothing
heavy (no torch, ray, optuna or textual) and nothing else of advisor's.

- ``errors``: the exceptions, one root (``AdvisorError``), each with its exit status;
- ``config``: ``TrialConfig`` (one point of the space), the knobs' value domains;
- ``export_format``: the exported config file (read, validate, write atomically);
- ``results``: what a trial is given (``TrialPayload``, ``TrialSettings``) and returns
  (``TrialResult``), the failure classes;
- ``stored``: a trial as stored in the study (user attributes) and read back
  (``TrialRecord``);
- ``objectives``: directions, constraints and feasibility, ratios to the baseline,
  dominance, the Pareto front, hypervolume;
- ``events``: what the Tuner reports while a study runs (typed);
- ``units``: parsing and formatting sizes, rates, ratios, messages.
"""
