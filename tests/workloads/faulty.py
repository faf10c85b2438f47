"""A digits MLP whose behaviour is chosen by environment-free knobs: the batch size.

batch_size 16: hangs; batch_size 32: user code raises a ValueError; batch_size 128: loss
becomes NaN; batch_size 256: the worker process aborts (a hard crash); batch_size 512:
forward raises torch.OutOfMemoryError (as CUDA would at a size too large); other sizes
train normally. (OOM at the largest size: known-OOM learning would skip anything larger.)
"""

import os
import time

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 64}


class Faulty(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        n = x.shape[0]
        if n == 512:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (declared by the test model)")
        if n == 32:
            raise ValueError("user code failed at batch 32")
        if n == 256:
            os.abort()
        if n == 16:
            time.sleep(3600)
        out = self.net(x)
        return out * float("nan") if n == 128 else out


def model():
    return Faulty()


def datasets():
    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target)
    return TensorDataset(x[:1400], y[:1400]), TensorDataset(x[1400:], y[1400:])
