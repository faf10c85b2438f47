"""A Transformer encoder (nn.TransformerEncoder over the 8 rows of a digit as tokens): its
attention reads its output projection's weight directly, which pruning and DDP must allow."""

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 32}

class Enc(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 96)
        layer = nn.TransformerEncoderLayer(96, 4, 192, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(96, 10)
    def forward(self, x):
        h = self.encoder(self.embed(x.view(-1, 8, 8)))
        return self.head(h.mean(1))

def model():
    return Enc()

def datasets():
    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target)
    return TensorDataset(x[:1400], y[:1400]), TensorDataset(x[1400:], y[1400:])
