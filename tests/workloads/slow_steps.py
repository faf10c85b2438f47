"""A model.py whose every forward pass takes at least 20 ms, so that a trial lasts a few
seconds whatever the machine: for tests that must catch a trial while it runs."""

import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 32}


class Slow(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x):
        time.sleep(0.02)
        return self.body(x)


def model():
    return Slow()


def datasets():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(640, 8, generator=g)
    y = (x[:, 0] > 0).long()
    return TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])
