"""A model.py that works, except with micro-batches of 16: its forward raises then, so
``advisor doctor`` finds grad_accumulation=4 failing on it (BASELINE's batch of 64 in 4
micro-batches) while 2 and 8 work. Generated data, a few milliseconds a step."""

import torch
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 64}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

    def forward(self, x):
        if x.shape[0] == 16:
            raise RuntimeError("this model refuses micro-batches of 16 samples")
        return self.body(x)


def model():
    return Net()


def datasets():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(640, 32, generator=g)
    y = (x[:, :4]).argmax(1)
    return TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])
