"""A multilayer perceptron on scikit-learn's bundled 8x8 digits (no download).

    advisor tune examples/digits_mlp.py
"""

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
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0  # (N, 64)
    y = torch.tensor(digits.target, dtype=torch.long)
    split = int(0.8 * len(x))
    return TensorDataset(x[:split], y[:split]), TensorDataset(x[split:], y[split:])
