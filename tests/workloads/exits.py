"""A digits MLP whose own code ends badly at some batch sizes (each passes the two-sample
preflight): batch_size 32: loss() calls sys.exit(7); batch_size 48: forward raises
KeyboardInterrupt itself; batch_size 24: a helper called from inside torch (an
nn.Sequential) raises ValueError. Other sizes train normally."""

import sys

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 64}


class Check(nn.Module):
    def forward(self, x):
        if x.shape[0] == 24:
            reject(x)
        return x


def reject(x):
    raise ValueError(f"rejected a batch of {x.shape[0]}")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 64), Check(), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        if x.shape[0] == 48:
            raise KeyboardInterrupt
        return self.net(x)


def model():
    return Net()


def loss(output, target):
    if output.shape[0] == 32:
        sys.exit(7)
    return nn.functional.cross_entropy(output, target)


def datasets():
    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target)
    return TensorDataset(x[:1400], y[:1400]), TensorDataset(x[1400:], y[1400:])
