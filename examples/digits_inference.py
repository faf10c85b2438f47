"""Inference tuning: an MLP classifier for scikit-learn's bundled 8x8 digits (no download).

    advisor tune examples/digits_inference.py --workload inference

An inference workload's model() returns trained weights. There is no hub to download them
from here, so model() trains the network itself, deterministically, in about a second:
every trial gets the same weights. Your own model() would load a checkpoint instead.
"""

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 256}

_WEIGHTS = {}  # trained once per process


def _data():
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0  # (N, 64)
    y = torch.tensor(digits.target, dtype=torch.long)
    split = int(0.8 * len(x))
    return (x[:split], y[:split]), (x[split:], y[split:])


def _network() -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, 512), nn.ReLU(),
        nn.Linear(512, 512), nn.ReLU(),
        nn.Linear(512, 512), nn.ReLU(),
        nn.Linear(512, 10),
    )


def model() -> nn.Module:
    net = _network()
    if not _WEIGHTS:
        (x, y), _ = _data()
        gen = torch.Generator().manual_seed(0)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            net = _network()
            opt = torch.optim.AdamW(net.parameters(), lr=2e-3)
            for _ in range(15):  # epochs
                for idx in torch.randperm(len(x), generator=gen).split(64):
                    opt.zero_grad()
                    nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
                    opt.step()
        _WEIGHTS.update({k: v.clone() for k, v in net.state_dict().items()})
    net.load_state_dict(_WEIGHTS)
    return net.eval()


def datasets():
    (xt, yt), (xv, yv) = _data()
    return TensorDataset(xt, yt), TensorDataset(xv, yv)
