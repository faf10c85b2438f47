"""A digits MLP with a bug only a batch of 128 samples reaches: its forward raises a
RuntimeError whose text varies from trial to trial (the call and a tensor's address), as a
real error's does. Every other batch size trains normally, whatever the other knobs."""

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 32}


class Buggy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if x.shape[0] == 128:
            raise RuntimeError(f"fused kernel failed for a batch of {x.shape[0]} at call {self.calls} "
                               f"(workspace at {hex(x.data_ptr())})")
        return self.net(x)


def model():
    return Buggy()


def datasets():
    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target)
    return TensorDataset(x[:1400], y[:1400]), TensorDataset(x[1400:], y[1400:])
