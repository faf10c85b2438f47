"""A digits MLP whose rank 1 misbehaves in a data-parallel trial, as chosen by the
ADVISOR_TEST_RANK_FAULT environment variable: raise, abort or hang."""

import os
import time

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 32}


class Faulty(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        fault = os.environ.get("ADVISOR_TEST_RANK_FAULT")
        if self.training and fault and os.environ.get("RANK") == "1":
            if fault == "raise":
                raise ValueError("rank 1 cannot go on")
            if fault == "abort":
                os.abort()
            if fault == "hang":
                time.sleep(3600)
        return self.head(self.body(x))


def model():
    return Faulty()


def datasets():
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    return TensorDataset(x[:1400], y[:1400]), TensorDataset(x[1400:], y[1400:])
