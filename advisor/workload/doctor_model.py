"""The tiny model ``advisor doctor`` runs every knob option on: a model.py written to the
contract, shipped with advisor, on generated data (nothing is read or downloaded).

Built so that every knob has something to act on: two convolution blocks of one class
(channels_last needs 2-D convolutions; activation checkpointing and FSDP need two or more
blocks), a self-attention layer over the 64 pixels that calls
``scaled_dot_product_attention`` (the attention kernel knob), then Linear layers whose
sizes are multiples of 16 (torchao's int8 and fp8 kernels, 2:4 sparsity), the output
layer last (pruning keeps it dense). A training step of 64 images takes about 10 ms on
one CPU core. torch is imported inside the functions: this file is also a module of the
installed package, which imports no torch at its top level.

The doctor runs a copy of this file from a private temporary directory (a model.py's
folder is put on ``sys.path``, and this package's folder must not be).
"""

from __future__ import annotations

from typing import Any

BASELINE = {"batch_size": 64}

SIDE = 8  # the images are SIDE x SIDE, one channel
CHANNELS = 16
HIDDEN = 64
CLASSES = 16


def model() -> Any:
    import torch.nn.functional as F
    from torch import nn

    class SelfAttention(nn.Module):
        """One head over the pixels, residual: (N, C, H, W) -> (N, C, H, W)."""

        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(CHANNELS, 3 * CHANNELS)
            self.out = nn.Linear(CHANNELS, CHANNELS)

        def forward(self, x: Any) -> Any:
            n, c, h, w = x.shape
            tokens = x.flatten(2).transpose(1, 2)  # (N, H*W, C)
            q, k, v = (t.unsqueeze(1) for t in self.qkv(tokens).chunk(3, dim=-1))
            attended = F.scaled_dot_product_attention(q, k, v).squeeze(1)
            return x + self.out(attended).transpose(1, 2).reshape(n, c, h, w)

    def conv_block(c_in: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(c_in, CHANNELS, 3, padding=1), nn.ReLU())

    return nn.Sequential(
        nn.Sequential(conv_block(1), conv_block(CHANNELS)),  # the repeated blocks
        SelfAttention(),
        nn.Flatten(),
        nn.Sequential(nn.Linear(CHANNELS * SIDE * SIDE, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)),
    )


def datasets() -> tuple[Any, Any]:
    """(train, validation): 1024 and 256 images whose class is the largest of 16 fixed
    random projections of the pixels (learnable, so the loss falls as it should)."""
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(0)
    teacher = torch.randn(SIDE * SIDE, CLASSES, generator=g)
    x = torch.randn(1024 + 256, 1, SIDE, SIDE, generator=g)
    y = (x.flatten(1) @ teacher).argmax(1)
    return TensorDataset(x[:1024], y[:1024]), TensorDataset(x[1024:], y[1024:])
