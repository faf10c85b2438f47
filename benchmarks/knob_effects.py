"""Each knob alone vs the baseline, measured as real trials (fresh Ray worker each).

    python benchmarks/knob_effects.py examples/digits_cnn.py --repeats 3
    python benchmarks/knob_effects.py examples/digits_inference.py --workload inference --repeats 3

For every variant (the baseline with one knob changed) and the baseline itself, runs
``--repeats`` trials, interleaved round-robin so drift on this noisy machine hits all
variants alike, and reports medians as ratios to the baseline's median: throughput
ratio, peak-memory ratio, accuracy delta (points). Writes JSON to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialSettings
from advisor.machine.hardware import detect, fingerprint
from advisor.runner.executor import run_one
from advisor.runner.ray_executor import RayExecutor
from advisor.workload.contract import load_workload
from advisor.workload.preflight import preflight

from common import commit

TRAIN_VARIANTS = [
    {"precision": "bf16"}, {"threads": 1}, {"channels_last": True}, {"compile": True},
    {"parallelism": "ddp", "devices": 2}, {"parallelism": "fsdp", "devices": 2},
    {"parallelism": "ddp", "devices": 2, "comm_hook": "fp16"}, {"parallelism": "ddp", "devices": 2, "bucket_mb": 1},
    {"pruning": "l1_unstructured", "prune_amount": 0.5}, {"pruning": "ln_structured", "prune_amount": 0.25},
    {"quantization": "qat_int8"}, {"activation_checkpointing": True},
    {"grad_accumulation": 2}, {"grad_accumulation": 4}, {"num_workers": 1}, {"num_workers": 2},
    {"batch_size": 32}, {"batch_size": 256},
]
INFERENCE_VARIANTS = [
    {"precision": "bf16"}, {"precision": "bf16_full"}, {"threads": 1}, {"compile": True},
    {"quantization": "int8_dynamic"}, {"quantization": "int8_weight_only"},
    {"pruning": "l1_unstructured", "prune_amount": 0.5}, {"pruning": "ln_structured", "prune_amount": 0.25},
    {"num_workers": 1}, {"batch_size": 32}, {"batch_size": 64},
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--workload", default="train", choices=("train", "inference"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--train-samples", type=int, help="default: as advisor tune (5 epochs)")
    ap.add_argument("--only", type=int, help="measure only the first N variants (a smoke run)")
    ap.add_argument("-o", "--output", help="JSON path (default benchmarks/results/knob_effects_<model>_<workload>.json)")
    args = ap.parse_args()

    workload = load_workload(args.model)
    facts = preflight(workload)
    hw = detect()
    base = TrialConfig.from_dict(workload.baseline)
    variants = INFERENCE_VARIANTS if args.workload == "inference" else TRAIN_VARIANTS
    variants = variants[: args.only] if args.only else variants
    samples = args.train_samples or (1 if args.workload == "inference" else 5 * facts["train_size"])
    settings = TrialSettings(train_samples=samples, device=hw.device, workload=args.workload)
    configs = [base] + [base.replace(**v) for v in variants]

    executor = RayExecutor(hw.device, state_dir=Path(tempfile.mkdtemp(prefix="advb-"))).start()
    runs: dict[int, list[dict]] = {i: [] for i in range(len(configs))}
    started = time.perf_counter()
    try:
        for rep in range(args.repeats):
            for i, cfg in enumerate(configs):
                result = run_one(executor, i, TrialPayload.of(workload, cfg, settings), timeout=600)
                runs[i].append(result.to_dict())
                status = f"{result.throughput:,.0f}/s" if result.ok else f"FAILED {result.failure_class}"
                print(f"[{rep + 1}/{args.repeats}] {_label(base, cfg):40s} {status}", flush=True)
    finally:
        executor.shutdown()

    rows = []
    b = _medians(runs[0])
    for i, cfg in enumerate(configs):
        m = _medians(runs[i])
        row = {"variant": _label(base, cfg), "config": cfg.to_dict(), **m,
               "failures": [r["failure_class"] + ": " + (r["failure_message"] or "")[:300] for r in runs[i] if not r["ok"]]}
        if m["throughput"] and b["throughput"]:
            row["throughput_ratio"] = m["throughput"] / b["throughput"]
            row["memory_ratio"] = m["peak_memory_bytes"] / b["peak_memory_bytes"]
            row["accuracy_delta_pt"] = 100 * (m["accuracy"] - b["accuracy"])
        rows.append(row)
    doc = {"what": "each knob alone vs the baseline; medians of repeated fresh trials; ratios to the baseline",
           "command": " ".join([Path(sys.executable).name, *sys.argv]), "workload": str(args.model),
           "workload_kind": args.workload, "baseline": base.to_dict(), "settings": settings.to_dict(),
           "repeats": args.repeats, "date": dt.date.today().isoformat(), "commit": commit(),
           "hardware": fingerprint(hw), "wall_s": time.perf_counter() - started, "rows": rows}
    out = Path(args.output or Path(__file__).parent / "results" /
               f"knob_effects_{Path(args.model).stem}_{args.workload}.json")
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\n{'variant':40s} {'throughput':>10s} {'memory':>8s} {'Δ acc':>8s}")
    for row in rows:
        if "throughput_ratio" in row:
            print(f"{row['variant']:40s} {row['throughput_ratio']:9.2f}x {row['memory_ratio']:7.2f}x "
                  f"{row['accuracy_delta_pt']:+7.1f}pt  (rel IQR {row['rel_iqr']:.2f})")
        else:
            print(f"{row['variant']:40s} failed: {row['failures'][:1]}")
    print(f"wrote {out}")
    return 0


def _label(base: TrialConfig, cfg: TrialConfig) -> str:
    diff = {k: v for k, v in cfg.to_dict().items() if v != getattr(base, k)}
    return "baseline" if not diff else " ".join(f"{k}={v}" for k, v in diff.items())


def _medians(results: list[dict]) -> dict:
    ok = [r for r in results if r["ok"]]
    if not ok:
        return {"throughput": None, "peak_memory_bytes": None, "accuracy": None, "rel_iqr": None, "n": 0}
    thr = [r["throughput"] for r in ok]
    return {"throughput": statistics.median(thr), "peak_memory_bytes": statistics.median(r["peak_memory_bytes"] for r in ok),
            "accuracy": statistics.median(r["score"] for r in ok),  # TrialResult.to_dict() calls it score
            "rel_iqr": statistics.median(r["telemetry"]["timing"]["rel_iqr"] for r in ok),
            "throughput_spread": (max(thr) - min(thr)) / statistics.median(thr), "n": len(ok)}



if __name__ == "__main__":
    sys.exit(main())
