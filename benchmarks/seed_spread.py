"""How far apart examples/digits_cnn.py's accuracy lands over seeds, with the optimizer it
ships (AdamW lr 1e-3) and the one it had (lr 3e-3): the README example's metric noise
(issue 29: the metric must be able to judge a 1-point drop). A plain 5-epoch loop like a
trial's (batch 64, shuffled by the seed), one thread; writes benchmarks/results/seed_spread.json.

    .venv/bin/python benchmarks/seed_spread.py"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import digits_cnn  # noqa: E402


def accuracy(seed: int, lr: float, epochs: int = 5) -> float:
    torch.manual_seed(seed)
    train, val = digits_cnn.datasets()
    net = digits_cnn.model()
    opt = torch.optim.AdamW(net.parameters(), lr=lr)
    loader = torch.utils.data.DataLoader(train, batch_size=64, shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))
    for _ in range(epochs):
        net.train()
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        x, y = val.tensors
        return float((net(x).argmax(1) == y).float().mean())


def main() -> None:
    torch.set_num_threads(1)
    seeds = list(range(10))
    rows = {}
    for lr in (1e-3, 3e-3):
        values = [accuracy(s, lr) for s in seeds]
        rows[str(lr)] = {"seeds": seeds, "values": values, "sd_pt": 100 * statistics.stdev(values),
                         "mean": statistics.fmean(values)}
        print(f"lr {lr:g}: sd {rows[str(lr)]['sd_pt']:.2f} pt, mean {rows[str(lr)]['mean']:.4f}", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    out = {"date": date.today().isoformat(), "commit": commit, "command": "python benchmarks/seed_spread.py",
           "note": "digits_cnn accuracy over seeds 0-9, plain 5-epoch loop, 1 thread", "by_lr": rows}
    (ROOT / "benchmarks" / "results" / "seed_spread.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
