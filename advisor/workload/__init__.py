"""The user's model.py and the contract it is held to (README: *The model.py contract*).

- ``contract``: load model.py (``load_workload``), call its functions with the contract's
  checks, call the model on a batch (``forward``);
- ``preflight``: the whole contract once on a two-sample batch, before anything runs;
- ``structure``: what the techniques see of a model (top-level blocks, prunable layers);
- ``template``: the commented model.py ``advisor init`` writes.
"""
