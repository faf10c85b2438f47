"""An MLP of large Linear layers (3 hidden layers of 4,096 x 4,096, 50M parameters) applied
to each position of sequences of 256 digits (scikit-learn's 8x8 images, 64 features each):
the GPU check's model for fp8 training, whose gain lives in large matrix products
(benchmarks/gpu/README.md). A batch of 64 sequences is 16,384 rows a matmul, fetched as 64
items: the GPU's work outweighs the host's. (Its first version fed 1,024 single images a
step; on an H200 its GPU was busy 11-35% of the time and bf16 gained 1.05x: it measured the
DataLoader.) Every Linear's dimensions are multiples of 16, as torch's fp8 matmul asks.

    advisor tune benchmarks/gpu/models/wide_mlp.py --space gpu
"""

import os

import torch
from torch import nn
from torch.utils.data import TensorDataset

TINY = os.environ.get("ADVISOR_GPU_CHECK_TINY") == "1"  # a dry run of the check on a CPU
BASELINE = {"batch_size": 8 if TINY else 64}
WIDTH = 64 if TINY else 4096
LENGTH = 16 if TINY else 256  # digits a sequence
METRIC = {"name": "per-digit accuracy", "fraction": True}  # what metric() below measures


def _sequences(x, y, count, seed):
    """``count`` sequences of LENGTH digits drawn from (x, y), each position labelled."""
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(len(x), (count, LENGTH), generator=g)
    return TensorDataset(x[index], y[index])


def datasets():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    cut = int(0.8 * len(x))  # the images of the validation sequences are never trained on
    return _sequences(x[:cut], y[:cut], 64 if TINY else 512, 1), _sequences(x[cut:], y[cut:], 16 if TINY else 64, 2)


def model():
    return nn.Sequential(
        nn.Linear(64, WIDTH), nn.GELU(),
        nn.Linear(WIDTH, WIDTH), nn.GELU(),
        nn.Linear(WIDTH, WIDTH), nn.GELU(),
        nn.Linear(WIDTH, WIDTH), nn.GELU(),
        nn.Linear(WIDTH, 16),  # 10 classes, padded to 16 outputs for fp8's shape rule
    )


def loss(output, target):
    return nn.functional.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


def metric(output, target):
    return (output.argmax(-1) == target).float().mean()


def optimizer(parameters):
    return torch.optim.AdamW(parameters, lr=3e-4)
