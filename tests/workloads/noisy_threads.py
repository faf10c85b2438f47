"""A model.py that logs from 12 threads, continuously while it trains (they start at the
first training step and stop a second after the last one), each through `logging` to
stderr and with print to stdout. advisor must still finish its trials, and the driver's
console must stay quiet (tests/faults/test_noisy_output.py).

NOISE = False gives its quiet twin (the tests write that copy)."""

import logging
import sys
import threading
import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 32}
NOISE = True
THREADS = 12
LAST_STEP = [0.0]
STARTED = []
log = logging.getLogger("noisy_threads")


def chatter(index):
    while time.monotonic() - LAST_STEP[0] < 1.0:
        log.warning("thread %d: still busy, %s", index, "." * 200)
        print(f"thread {index} says hello " * 10, flush=True)
    STARTED.clear()


def start_threads():
    if not STARTED:
        logging.basicConfig(stream=sys.stderr, level=logging.INFO)
        STARTED.append(True)
        for i in range(THREADS):
            threading.Thread(target=chatter, args=(i,), daemon=True).start()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x):
        if NOISE and self.training:
            LAST_STEP[0] = time.monotonic()
            start_threads()
        return self.body(x)


def model():
    return Net()


def datasets():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(640, 16, generator=g)
    y = (x[:, :4].argmax(1)).long()
    return TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])
