"""How far the machine itself moves a ratio: the digits CNN's training step at batch 64 in
fp32, bf16 autocast and bf16 + channels_last, in one process, in interleaved blocks of 5
steps (R rounds); prints fp32's median step and the two median ratios as one JSON line.

    T=2 R=20 python benchmarks/step_ratio.py             # T: torch threads (0: torch's default)

Its figures in benchmarks/results/step_ratio.txt came from running it quiet and beside one
`python3 -c "while True: pass"`, three rounds each, with T=1, T=2 and T=2 plus
OMP_WAIT_POLICY=PASSIVE (the loop is in that file's header)."""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CONFIGS = {"fp32": (False, False), "bf16": (True, False), "bf16_cl": (True, True)}  # (bf16 autocast, channels_last)


def main() -> int:
    sys.path.insert(0, str(EXAMPLES))
    import digits_cnn as workload

    threads = int(os.environ.get("T", "0"))
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    train, _ = workload.datasets()
    x, y = train.tensors[0][:64], train.tensors[1][:64]
    state = {}
    for name, (_, channels_last) in CONFIGS.items():
        model = workload.model()
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        state[name] = (model, workload.optimizer(model.parameters()))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(name: str) -> None:
        (model, optimizer), (bf16, channels_last) = state[name], CONFIGS[name]
        inputs = x.to(memory_format=torch.channels_last) if channels_last else x
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(inputs), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for name in CONFIGS:  # warm-up
        for _ in range(10):
            step(name)
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for _ in range(int(os.environ.get("R", "30"))):
        for name in CONFIGS:  # interleaved: each round times every configuration once
            started = time.perf_counter()
            for _ in range(5):
                step(name)
            times[name].append((time.perf_counter() - started) / 5)
    med = {name: statistics.median(v) for name, v in times.items()}
    print(json.dumps({"threads": torch.get_num_threads(), "fp32_ms": round(med["fp32"] * 1e3, 3),
                      "bf16_ratio": round(med["fp32"] / med["bf16"], 3),
                      "bf16_cl_ratio": round(med["fp32"] / med["bf16_cl"], 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
