"""Where trials run, apart from what runs (the search never touches a runner).

- ``executor``: the ``Executor`` protocol every runner satisfies, and ``run_one``;
- ``ray_executor``: the Ray runner: an embedded local instance or a cluster, one trial
  per node (CPU) or per GPU, each in a fresh process.
"""
