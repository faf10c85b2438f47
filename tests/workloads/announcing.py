"""The digits MLP, except that a rank of a parallel trial building the model leaves a file
in $ADVISOR_TEST_ANNOUNCE (rank-RANK-PID): a test learns that a trial's ranks are running
(tests/clusters/spanning.py). Building it for the memory estimate (fake tensors) leaves none."""

import os
from pathlib import Path

_here = Path(__file__).resolve().parents[2] / "examples" / "digits_mlp.py"
exec(compile(_here.read_text(), str(_here), "exec"))  # noqa: S102 - the example's contract, unchanged

_build = model  # noqa: F821 - defined by the example


def model():  # noqa: F811
    import torch

    where = os.environ.get("ADVISOR_TEST_ANNOUNCE")
    if where and "RANK" in os.environ and torch._guards.detect_fake_mode() is None:
        (Path(where) / f"rank-{os.environ['RANK']}-{os.getpid()}").touch()
    return _build()
