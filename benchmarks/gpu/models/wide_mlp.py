"""An MLP of large Linear layers (3 hidden layers of 4,096 x 4,096, 50M parameters) on the
digits of scikit-learn, at a batch of 1,024: the GPU check's model for fp8 training, whose
gain lives in large matrix products (benchmarks/gpu/README.md). Every Linear's dimensions
are multiples of 16, as torch's fp8 matmul asks.

    advisor tune benchmarks/gpu/models/wide_mlp.py --space gpu
"""

import os

import torch
from torch import nn
from torch.utils.data import TensorDataset

TINY = os.environ.get("ADVISOR_GPU_CHECK_TINY") == "1"  # a dry run of the check on a CPU
BASELINE = {"batch_size": 128 if TINY else 1024}
WIDTH = 64 if TINY else 4096


def datasets():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(x), generator=g)
    x, y = x[order], y[order]
    cut = int(0.8 * len(x))
    return TensorDataset(x[:cut], y[:cut]), TensorDataset(x[cut:], y[cut:])


def model():
    return nn.Sequential(
        nn.Linear(64, WIDTH), nn.GELU(),
        nn.Linear(WIDTH, WIDTH), nn.GELU(),
        nn.Linear(WIDTH, WIDTH), nn.GELU(),
        nn.Linear(WIDTH, WIDTH), nn.GELU(),
        nn.Linear(WIDTH, 16),  # 10 classes, padded to 16 outputs for fp8's shape rule
    )


def optimizer(parameters):
    return torch.optim.AdamW(parameters, lr=3e-4)
