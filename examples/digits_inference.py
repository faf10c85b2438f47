"""Inference tuning: an MLP classifier for scikit-learn's bundled 8x8 digits (no download).

    advisor tune examples/digits_inference.py --workload inference

An inference workload's model() returns trained weights. There is no hub to download them
from here, so the first model() call trains the network itself, deterministically (a few
seconds), and keeps the weights in a cache file, as a hub download would: advisor's
preflight calls model() once before the study, so every trial loads the same weights from
the cache. Your own model() would load a checkpoint or call from_pretrained() instead.
"""

import os
import tempfile
from pathlib import Path

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

BASELINE = {"batch_size": 256}

_WEIGHTS = {}  # loaded (or trained) once per process


def _data():
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0  # (N, 64)
    y = torch.tensor(digits.target, dtype=torch.long)
    split = int(0.8 * len(x))
    return (x[:split], y[:split]), (x[split:], y[split:])


def _network() -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, 512), nn.ReLU(),
        nn.Linear(512, 512), nn.ReLU(),
        nn.Linear(512, 512), nn.ReLU(),
        nn.Linear(512, 10),
    )


def _cache() -> Path:
    """Where the trained weights are kept: like a hub's cache, under $XDG_CACHE_HOME or ~/.cache."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "advisor" / "examples" / f"digits_inference-v1-torch{torch.__version__}.pt"


def _train() -> dict:
    (x, y), _ = _data()
    gen = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = _network()
        opt = torch.optim.AdamW(net.parameters(), lr=2e-3)
        for _ in range(15):  # epochs
            for idx in torch.randperm(len(x), generator=gen).split(64):
                opt.zero_grad()
                nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
                opt.step()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def model() -> nn.Module:
    net = _network()
    if not _WEIGHTS:
        path = _cache()
        try:
            _WEIGHTS.update(torch.load(path, weights_only=True))
        except (OSError, RuntimeError, EOFError, ValueError):  # not there yet (or unreadable): train and keep
            _WEIGHTS.update(_train())
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as fh:
                    torch.save(_WEIGHTS, fh)
                os.replace(fh.name, path)  # whole or not at all, whoever writes it at the same time
            except OSError:
                pass  # a read-only home: every process trains its own (the same) weights
    net.load_state_dict(_WEIGHTS)
    return net.eval()


def datasets():
    (xt, yt), (xv, yv) = _data()
    return TensorDataset(xt, yt), TensorDataset(xv, yv)
