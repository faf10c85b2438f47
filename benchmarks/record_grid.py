"""Measure every configuration of a small space, several times each, as real trials (a
trial process per cell, the same code as `advisor tune`), and save the table that
benchmarks/replay.py answers studies from. Run by hand (it takes tens of minutes):

    python benchmarks/record_grid.py examples/digits_cnn.py --space benchmarks/data/grid_cpu.yaml --repeats 2

Repeats are interleaved (every cell once, then every cell again) so drift on this noisy
machine hits all cells alike. Failed runs are kept with their failure class.

With ``--parts`` each cell is also measured as two-stage evaluation runs it, right after
its full trial: the probe (``probes``: speed, memory, fingerprint, wall time) and the
training run (``accuracy_runs``: metric, learning curve, wall time), so that
benchmarks/replay.py can answer either kind of study and charge each part its own time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from advisor.core.results import TrialPayload, TrialSettings
from advisor.machine.hardware import detect, fingerprint
from advisor.runner.executor import run_one
from advisor.runner.ray_executor import RayExecutor
from advisor.search.space import filter_space, load_space
from advisor.study.confirmation.pairing import PROBE_TIMING_S
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
    ap.add_argument("--parts", action="store_true", help="also record each cell's probe and training run")
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
    cells = [{"config": c.to_dict(), "key": c.key(), "runs": []} | ({"probes": [], "accuracy_runs": []} if args.parts else {})
             for c in configs]
    started = time.perf_counter()
    try:
        for rep in range(args.repeats):
            for i, (cell, config) in enumerate(zip(cells, configs)):
                t0 = time.perf_counter()
                r = run_one(executor, i, TrialPayload.of(workload, config, settings), timeout=600)
                cell["runs"].append({k: getattr(r, k) for k in (
                    "ok", "failure_class", "throughput", "peak_memory_bytes", "accuracy", "step_time_median_s",
                    "step_time_iqr_s", "compute_s")} | {"wall_s": time.perf_counter() - t0})
                status = f"{r.throughput:,.0f}/s {r.score:.4f}" if r.ok else f"FAILED {r.failure_class}"
                if args.parts:
                    status += "  " + _parts(executor, workload, config, settings, cell, i)
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


def _parts(executor, workload, config, settings, cell, i) -> str:
    """The cell's probe and training run, each in a fresh trial process, with their wall times."""
    t0 = time.perf_counter()
    p = run_one(executor, i, TrialPayload.of(workload, config, replace(settings, part="probe",
                                                                      max_timing_s=PROBE_TIMING_S)), timeout=600)
    cell["probes"].append({k: getattr(p, k) for k in ("ok", "failure_class", "throughput", "peak_memory_bytes",
                                                      "step_time_median_s", "step_time_iqr_s", "compute_s")}
                          | {"wall_s": time.perf_counter() - t0, "fingerprint": p.telemetry.get("fingerprint")})
    t0 = time.perf_counter()
    a = run_one(executor, i, TrialPayload.of(workload, config, replace(settings, part="training")), timeout=600)
    cell["accuracy_runs"].append({k: getattr(a, k) for k in ("ok", "failure_class", "accuracy", "train_samples",
                                                             "compute_s")}
                                 | {"wall_s": time.perf_counter() - t0, "curve": a.telemetry.get("curve"),
                                    "initial_loss": a.telemetry.get("initial_loss")})
    return (f"probe {p.throughput:,.0f}/s" if p.ok else f"probe FAILED {p.failure_class}") + (
        f", accuracy {a.score:.4f}" if a.ok else f", accuracy FAILED {a.failure_class}")


if __name__ == "__main__":
    sys.exit(main())
