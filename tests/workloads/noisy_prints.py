"""A model.py whose code is noisy: every training step prints ~2 MB to stdout and ~1 MB to
stderr, through print, through the file descriptors directly (os.write), partly without
newlines and partly as binary junk. advisor must still finish its trials without the
driver's console or disk filling up (tests/faults/test_noisy_output.py).

NOISE = False gives its quiet twin (the tests write that copy)."""

import os
import sys

import torch
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 32}
NOISE = True
LINE = "step chatter " * 8 + "\n"  # ~105 bytes
JUNK = bytes(range(256)) * 16  # 4 KiB of binary, with NULs and no newline at its end


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x):
        if NOISE and self.training:
            sys.stdout.write(LINE * 10_000)  # ~1 MB of lines
            sys.stdout.flush()
            os.write(1, b"x" * 1_000_000)  # ~1 MB without a newline, past Python's buffers
            os.write(2, JUNK * 128)  # 0.5 MB of binary junk
            print("warning: " + "w" * 500_000, file=sys.stderr)  # one 0.5 MB line
        return self.body(x)


def model():
    print("building the model")  # once per trial, and in the preflight
    return Noisy()


def datasets():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(640, 16, generator=g)
    y = (x[:, :4].argmax(1)).long()
    return TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])
