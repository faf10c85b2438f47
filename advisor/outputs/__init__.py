"""What a user reads and takes away from a study.

- ``summary``: the front with ratios to the baseline, trial counts, failures, each
  knob's marginal effect (plain data the other outputs format);
- ``console``: what ``advisor tune`` prints while it runs and at the end;
- ``export``: choosing a trial (by number or pick rule) and its export document;
- ``python_script``: ``advisor export --format python``, a runnable script;
- ``report`` and ``report_plots``: ``advisor report``, Markdown with PNG plots;
- ``remeasure``: ``advisor measure``, an exported config measured again.
"""
