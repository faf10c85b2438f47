"""examples/digits_mlp.py with an absurd learning rate: its training really diverges (the
loss leaves the untrained model's far behind within a few steps)."""

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 32}


def model() -> nn.Module:
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(64, 256), nn.ReLU(),
        nn.Linear(256, 256), nn.ReLU(),
        nn.Linear(256, 10),
    )


def datasets():
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    split = int(0.8 * len(x))
    return TensorDataset(x[:split], y[:split]), TensorDataset(x[split:], y[split:])


def optimizer(parameters):
    return torch.optim.SGD(parameters, lr=50.0)
