"""The worker side: one configuration measured in a process of its own. Read in this
order, it is the path of one trial:

- ``forkserver``: the Ray task forks the trial's process from a warm fork server
  (``run_forked``; ``ADVISOR_COLD_TRIALS=1``: the task runs the trial itself);
- ``entry``: ``run_trial(payload)``, the trial process's entry point: the GPU idle check,
  then one process (``single``) or one process per rank (``ranks``);
- ``single``: load model.py, run the loop, turn a failure into a result with its class;
- ``loop``: the measured work: build, apply the knobs, train (or infer) with timed steps,
  peak memory, evaluate;
- ``ranks``: data-parallel trials, launched the way torchrun launches them, supervised;
- ``process``: what every forked process does first (die with its parent, take its
  environment and thread count).
"""
