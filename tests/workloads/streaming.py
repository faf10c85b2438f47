"""A training set that is a stream: an IterableDataset generating (x, y) pairs with a
learnable rule (y: which of x's first four values is largest), the same items in the same
order each time it is started. The validation set is map-style (generated apart).

$ADVISOR_TEST_STREAM_ITEMS sets how many items one pass gives (default 512; 0: an empty
stream; -1: an infinite one). READ counts what this process read from it: items, passes.
"""

import itertools
import os

import torch
from torch import nn
from torch.utils.data import IterableDataset, TensorDataset

BASELINE = {"batch_size": 32}
FEATURES, CLASSES = 16, 4
READ = {"items": 0, "passes": 0}


class Stream(IterableDataset):
    def __init__(self, items):
        self.items = items  # None: never ends

    def __iter__(self):
        READ["passes"] += 1
        g = torch.Generator().manual_seed(0)  # every pass (and every trial) reads the same stream
        for _ in range(self.items) if self.items is not None else itertools.count():
            x = torch.randn(FEATURES, generator=g)
            READ["items"] += 1
            yield x, int(x[:CLASSES].argmax())


def model():
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))


def datasets():
    items = int(os.environ.get("ADVISOR_TEST_STREAM_ITEMS", "512"))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, FEATURES, generator=g)
    return Stream(None if items < 0 else items), TensorDataset(x, x[:, :CLASSES].argmax(1))


def optimizer(parameters):
    return torch.optim.AdamW(parameters, lr=1e-2)  # a small budget learns the rule
