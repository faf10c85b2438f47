"""What to try next, and what was learned so far. Never runs a trial itself.

- ``space``: search spaces (YAML presets and files) validated, filtered for the machine;
- ``one_knob``: the default strategy's first step, the baseline with one knob changed;
- ``combine``: its second step, combinations of the one-knob changes that paid off;
- ``known_oom``: configurations that would run out of memory like an earlier trial;
- ``samplers``: the Optuna samplers a study can use;
- ``strategy``: ``Strategy``, all of the above behind two calls the Tuner makes,
  ``propose()`` and ``tell(result)``.
"""
