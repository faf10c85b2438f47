"""The memory plan against what a study's trials measured: each trial's estimate
(advisor/trial/estimate.py, made before it allocated anything) beside its measured peak.

    python benchmarks/gpu/memory_plans.py STUDY.db STUDY_NAME -o memory_plans.json
    python benchmarks/gpu/memory_plans.py --knobs knobs_train.json -o memory_plans_knobs.json

On a GPU the measured peak is ``torch.cuda.max_memory_allocated`` of the steady state (the
tensors' own peak, what the estimate counts; the caching allocator's reserve is kept beside
it as ``reserved_peak_bytes``). The error is estimate / measured - 1; the summary gives its
median and its largest magnitude, over the trials that have both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def from_study(path: str, name: str) -> list[dict]:
    import optuna

    from advisor.core.stored import read_trial

    study = optuna.load_study(study_name=name, storage=f"sqlite:///{path}")
    rows = []
    for trial in study.get_trials(deepcopy=False):
        record = read_trial(trial)
        estimate = record.get("memory_estimate") or {}
        rows.append({"trial": record.number, "config": record.description, "state": record.state,
                     "estimate_bytes": estimate.get("peak_bytes"), "unavailable": estimate.get("unavailable"),
                     "estimate_s": estimate.get("seconds"), "estimate_process": estimate.get("process"),
                     "measured_bytes": record.get("peak_memory_bytes"),
                     "reserved_peak_bytes": (record.get("telemetry") or {}).get("reserved_peak_bytes")})
    return rows


def from_knobs(path: str) -> list[dict]:
    doc = json.loads(Path(path).read_text())
    rows = []
    for row in doc["rows"]:
        for run in row.get("runs", []):
            estimate = run.get("estimate") or {}
            rows.append({"model": row["model"], "config": row["variant"], "estimate_bytes": estimate.get("peak_bytes"),
                         "unavailable": estimate.get("unavailable"), "estimate_s": estimate.get("seconds"),
                         "estimate_process": estimate.get("process"),
                         "measured_bytes": run.get("peak_memory_bytes"),
                         "reserved_peak_bytes": run.get("reserved_peak_bytes")})
    return rows


def summarise(rows: list[dict]) -> dict:
    errors = []
    for row in rows:
        if row.get("estimate_bytes") and row.get("measured_bytes"):
            row["error"] = row["estimate_bytes"] / row["measured_bytes"] - 1
            errors.append(row["error"])
    return {"with_both": len(errors), "unavailable": sum(1 for r in rows if r.get("unavailable")),
            "median_error": statistics.median(errors) if errors else None,
            "median_abs_error": statistics.median(abs(e) for e in errors) if errors else None,
            "worst_error": max(errors, key=abs) if errors else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study_db", nargs="?")
    ap.add_argument("study_name", nargs="?")
    ap.add_argument("--knobs", help="a knobs_TABLE.json of benchmarks/gpu/knobs.py instead of a study")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    if args.knobs:
        rows = from_knobs(args.knobs)
    elif args.study_db and args.study_name:
        rows = from_study(args.study_db, args.study_name)
    else:
        ap.error("give STUDY_DB and STUDY_NAME, or --knobs")
    doc = {"summary": summarise(rows), "rows": rows}
    Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["summary"]))
    for row in rows:
        if row.get("unavailable"):
            print(f"  {row['config'][:60]:60s} estimate unavailable: {row['unavailable'][:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
