"""A tiny language model in the shape most real ones have: blocks in a ModuleList inside
a wrapper, the output layer tied to the input embedding (one Parameter, two modules).
Random tokens with a learnable rule (the next token is the current one plus one)."""

import torch
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 16}
VOCAB, WIDTH, CONTEXT = 32, 32, 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList(Block() for _ in range(3))

    def forward(self, idx):
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x)
        return x


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = Body()
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.body.embed.weight

    def forward(self, idx):
        return self.head(self.body(idx))


def model():
    return TiedLM()


def datasets():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (640, CONTEXT), generator=g)
    y = (x + 1) % VOCAB
    return TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])
