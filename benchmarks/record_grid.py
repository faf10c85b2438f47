"""Measure every configuration of a small space, several times each, as real trials (a
trial process per cell, the same code as `advisor tune`), and save the table that
benchmarks/replay.py answers studies from. Run by hand (it takes tens of minutes):

    python benchmarks/record_grid.py examples/digits_cnn.py --space benchmarks/data/grid_cpu.yaml --repeats 2

Repeats are interleaved (every cell once, then every cell again) so drift on this noisy
machine hits all cells alike. Failed runs are kept with their failure class.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

from advisor.core.results import TrialPayload, TrialSettings
from advisor.machine.hardware import detect, fingerprint
from advisor.runner.executor import run_one
from advisor.runner.ray_executor import RayExecutor
from advisor.search.space import filter_space, load_space
from advisor.workload.contract import load_workload
from advisor.workload.preflight import preflight

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--space", default=str(HERE / "data" / "grid_cpu.yaml"))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--train-samples", type=int, help="default: 2 epochs of the training set")
    ap.add_argument("--max-timing-s", type=float, default=2.0, help="cap of each trial's extra timing phase")
    ap.add_argument("--limit", type=int, help="only the first N cells (a smoke run)")
    ap.add_argument("-o", "--output", default=str(HERE / "data" / "grid_digits_cnn_cpu.json"))
    args = ap.parse_args()

    workload = load_workload(args.model)
    facts = preflight(workload)
    hw = detect()
    space = filter_space(load_space(args.space), hw, facts)
    configs = space.configs()[: args.limit] if args.limit else space.configs()
    settings = TrialSettings(train_samples=args.train_samples or 2 * facts["train_size"], device=hw.device,
                             max_timing_s=args.max_timing_s)
    executor = RayExecutor(hw.device, state_dir=Path(tempfile.mkdtemp(prefix="advg-"))).start()
    cells = [{"config": c.to_dict(), "key": c.key(), "runs": []} for c in configs]
    started = time.perf_counter()
    try:
        for rep in range(args.repeats):
            for i, (cell, config) in enumerate(zip(cells, configs)):
                t0 = time.perf_counter()
                r = run_one(executor, i, TrialPayload.of(workload, config, settings), timeout=600)
                cell["runs"].append({k: getattr(r, k) for k in (
                    "ok", "failure_class", "throughput", "peak_memory_bytes", "accuracy", "step_time_median_s",
                    "step_time_iqr_s", "compute_s")} | {"wall_s": time.perf_counter() - t0})
                status = f"{r.throughput:,.0f}/s {r.accuracy:.4f}" if r.ok else f"FAILED {r.failure_class}"
                print(f"[{rep + 1}/{args.repeats}] {i + 1:3d}/{len(cells)} {status}", flush=True)
    finally:
        executor.shutdown()
    doc = {"what": "every configuration of the space measured repeatedly in fresh trials",
           "command": " ".join(["python", *sys.argv]), "workload": args.model, "space": args.space,
           "space_dict": space.to_dict(), "settings": settings.to_dict(), "repeats": args.repeats,
           "baseline": workload.baseline, "date": dt.date.today().isoformat(), "hardware": fingerprint(hw),
           "wall_s": time.perf_counter() - started, "cells": cells}
    Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.output}: {len(cells)} cells x {args.repeats} repeats in {doc['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
