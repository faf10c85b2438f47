"""The model.py template written by `advisor init`."""

TEMPLATE = '''"""A workload for `advisor tune`. Fill in model() and datasets(); the rest is optional.

    advisor tune model.py
"""

import torch
from torch import nn
from torch.utils.data import TensorDataset

# Your current setup. Trial 0 measures it (in fp32) and every result is compared with it.
BASELINE = {"batch_size": 64}


def model() -> nn.Module:
    """Return a fresh model (for inference tuning: with trained weights)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))


def datasets():
    """Return (train, validation): map-style datasets whose items are (input, target).

    input may be a tensor (model(x)), a tuple (model(*x)) or a dict (model(**x)).
    Use data on disk or generated here: trials must not download anything.
    """
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 32, generator=g)
    y = (x[:, :4].argmax(dim=1))
    return TensorDataset(x[:1600], y[:1600]), TensorDataset(x[1600:], y[1600:])


# Optional. Defaults: cross entropy, top-1 accuracy, AdamW(lr=1e-3).
def loss(output, target):
    return nn.functional.cross_entropy(output, target)


def metric(output, target) -> float:
    """Higher is better; averaged over the validation set, weighted by batch size."""
    return (output.argmax(dim=-1) == target).float().mean().item()


def optimizer(parameters):
    return torch.optim.AdamW(parameters, lr=1e-3)
'''
