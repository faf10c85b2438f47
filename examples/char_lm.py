"""A small decoder-only language model (pure PyTorch, scaled-dot-product attention) that
learns to predict the next character of the Python standard library's own source code,
which ships with every Python (no download). The metric is next-character accuracy.

    advisor tune examples/char_lm.py

One training run (the default budget: 5 epochs of 4,096 windows of 64 characters) takes
tens of seconds on a 2-core CPU; a probe about a second.
"""

import math
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

BASELINE = {"batch_size": 32}
METRIC = {"name": "next-char accuracy", "fraction": True}  # what metric() below measures

CONTEXT = 64
WIDTH = 128
HEADS = 4
LAYERS = 2
# source files of the standard library read as the corpus (those present in this Python)
MODULES = ("textwrap", "argparse", "difflib", "inspect", "dataclasses", "functools", "pathlib", "typing",
           "statistics", "fractions", "calendar", "shutil", "tarfile", "json/decoder", "logging/__init__")
TRAIN_WINDOWS, VAL_WINDOWS = 4096, 512


def _corpus() -> bytes:
    root = os.path.dirname(os.__file__)
    parts = []
    for name in MODULES:
        path = os.path.join(root, name + ".py")
        if os.path.exists(path):
            with open(path, "rb") as fh:
                parts.append(fh.read())
    if not parts:
        raise RuntimeError(f"no standard-library source found under {root} (a Python installed without .py files)")
    text = b"".join(parts)
    return bytes(b if b < 128 else 63 for b in text)  # ASCII; anything else becomes '?'


class Windows(Dataset):
    """Windows of CONTEXT characters; the target is the same window shifted by one."""

    def __init__(self, data: torch.Tensor, starts: torch.Tensor) -> None:
        self.data, self.starts = data, starts

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i):
        s = int(self.starts[i])
        chunk = self.data[s:s + CONTEXT + 1]
        return chunk[:-1], chunk[1:]


def datasets():
    data = torch.tensor(list(_corpus()), dtype=torch.long)
    split = int(0.9 * len(data))  # the validation text comes after the training text
    g = torch.Generator().manual_seed(0)
    train_starts = torch.randint(0, split - CONTEXT - 1, (TRAIN_WINDOWS,), generator=g)
    val_starts = torch.randint(split, len(data) - CONTEXT - 1, (VAL_WINDOWS,), generator=g)
    return Windows(data, train_starts), Windows(data, val_starts)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.up = nn.Linear(WIDTH, 4 * WIDTH)
        self.down = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class CharLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(128, WIDTH)
        self.positions = nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.Sequential(*(Block() for _ in range(LAYERS)))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, 128)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=1 / math.sqrt(WIDTH))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(positions)
        return self.head(self.norm(self.blocks(x)))


def model() -> nn.Module:
    return CharLM()


def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(output.reshape(-1, output.shape[-1]).float(), target.reshape(-1))


def metric(output: torch.Tensor, target: torch.Tensor) -> float:
    """Next-character accuracy over every position of every window."""
    return (output.argmax(-1) == target).float().mean().item()


def optimizer(parameters):
    return torch.optim.AdamW(parameters, lr=3e-3)
