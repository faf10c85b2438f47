"""A noisy model.py (~1 MB of output per training step) whose configurations fail:
batch size 32 raises in model.py's forward at the fourth training step, batch size 64
prints its last words and aborts the process (a hard crash, no traceback); the baseline
(16) completes. The failures must still read as the user's exception line and the end of
the output (tests/faults/test_noisy_output.py)."""

import os
import sys

import torch
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 16}
STEPS = [0]


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x):
        if self.training:
            STEPS[0] += 1
            sys.stdout.write(("noise " * 20 + "\n") * 8_000)  # ~1 MB
            print("e" * 4096, file=sys.stderr)
            if STEPS[0] == 4 and len(x) == 32:
                raise ValueError("noisy model.py gave up at step 4")
            if STEPS[0] == 4 and len(x) == 64:
                print("last words before the crash", flush=True)
                os.abort()
        return self.body(x)


def model():
    return Noisy()


def datasets():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(640, 16, generator=g)
    y = (x[:, :4].argmax(1)).long()
    return TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])
