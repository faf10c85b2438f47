"""advisor.tune() from a script (or a notebook cell): the model.py contract's pieces passed
as functions. Here they come from examples/digits_mlp.py, imported as a module; yours come
from any module a fresh process can import (not from this script itself: each trial runs
in a fresh process, which imports them).

    python examples/tune_from_python.py
"""

from digits_mlp import datasets, model  # the directory of this script is on sys.path

import advisor

result = advisor.tune(model, datasets, baseline={"batch_size": 64}, space="eager", trials=8, name="digits_mlp_api")
print(result.summary())
result.export("fastest.yaml", pick="fastest")  # what `advisor export --pick fastest -o fastest.yaml` writes
print("fastest:", result.config("fastest"))   # the knobs, as advisor.apply(model, config) takes them
