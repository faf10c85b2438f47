"""examples/digits_mlp.py with an absurd learning rate: its training really diverges (the
loss leaves the untrained model's far behind within a few steps)."""

from pathlib import Path

import torch

_here = Path(__file__).resolve().parents[2] / "examples" / "digits_mlp.py"
exec(compile(_here.read_text(), str(_here), "exec"))  # noqa: S102 - the example's contract, unchanged


def optimizer(parameters):
    return torch.optim.SGD(parameters, lr=50.0)
