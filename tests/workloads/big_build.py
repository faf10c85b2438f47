"""A model whose construction needs far more memory than it keeps: its weights are taken
from a large temporary tensor (~128 MiB) that is freed before model() returns. Its trials'
peak memory is the steady state's; the build's peak is telemetry."""

import torch
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 32}


def model() -> nn.Module:
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    scratch = torch.randn(32 * 2**20, generator=torch.Generator().manual_seed(0))  # 128 MiB, touched
    with torch.no_grad():
        net[0].weight.copy_(scratch[: 64 * 64].view(64, 64) * 0.1)
    del scratch
    return net


def datasets():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 64, generator=g)
    y = x[:, :10].argmax(1)
    return TensorDataset(x[:448], y[:448]), TensorDataset(x[448:], y[448:])
