"""What the techniques see of a model's structure, decided in one place: the preflight
reports these counts (so a pointless option is dropped before the search) and the
techniques act on the same layers.
"""

from __future__ import annotations

from typing import Any


def blocks(module: Any) -> list[Any]:
    """The model's top-level children that hold parameters: what activation checkpointing
    wraps, one block at a time."""
    return [c for c in module.children() if any(True for _ in c.parameters())]


def prunable(module: Any) -> list[tuple[str, Any]]:
    """(name, layer) of the Linear / Conv layers that pruning touches: all but the last,
    the output layer, which is kept dense (pruning it removes whole classes)."""
    import torch.nn as nn

    layers = [(n, m) for n, m in module.named_modules()
              if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d))]
    return layers[:-1]
