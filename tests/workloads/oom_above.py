"""A digits MLP that runs out of memory (a real torch.OutOfMemoryError, as CUDA raises it)
whenever a training batch holds 64 samples or more."""

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 32}


class Hungry(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        if self.training and x.shape[0] >= 64:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {x.shape[0]} GiB (simulated)")
        return self.net(x)


def model():
    return Hungry()


def datasets():
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    return TensorDataset(x[:1400], y[:1400]), TensorDataset(x[1400:], y[1400:])
