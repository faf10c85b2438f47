"""How close the memory plan's estimate (advisor/trial/estimate.py: FakeTensorMode and
PyTorch's memory tracker over a fake process group, before a trial allocates anything) comes
to the peak the trial then measures, per example and parallel strategy.

    python benchmarks/memory_estimate.py [--repeats 2] [--out results/memory_estimate.json]

Each configuration's probe runs in a fresh process that has imported torch first, as a trial
forked from advisor's warm fork server does, so the estimate runs in a fork of it exactly as
in a study. On a CPU the measured figure is the process's resident memory above its
pre-model baseline (allocator slack, the libraries' own buffers and whatever the build
imported count); the estimate counts tensors. The error is estimate / measured - 1. Where the configuration
runs in one process (or is DDP, estimated as one), the same two steps also run on real
tensors under the same tracker: the estimate against the tensors' true peak, which is what a
GPU's figure (max_memory_allocated) measures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import HERE, commit

REPO = HERE.parent
CASES = [  # (example, config) pairs: every strategy on the decoder-only LM, the usual ones on the digits models
    ("char_lm.py", {"batch_size": 32}),
    ("char_lm.py", {"batch_size": 64}),
    ("char_lm.py", {"batch_size": 32, "parallelism": "ddp", "devices": 2}),
    ("char_lm.py", {"batch_size": 32, "parallelism": "fsdp", "devices": 2}),
    ("char_lm.py", {"batch_size": 32, "parallelism": "tp", "devices": 2}),
    ("char_lm.py", {"batch_size": 32, "parallelism": "pp", "devices": 2}),
    ("char_lm.py", {"batch_size": 32, "parallelism": "pp", "devices": 2, "pp_schedule": "gpipe", "pp_microbatches": 4}),
    ("char_lm.py", {"batch_size": 32, "activation_checkpointing": True}),
    ("digits_cnn.py", {"batch_size": 64}),
    ("digits_cnn.py", {"batch_size": 256}),
    ("digits_cnn.py", {"batch_size": 64, "parallelism": "fsdp", "devices": 2}),
    ("digits_mlp.py", {"batch_size": 64}),
    ("digits_mlp.py", {"batch_size": 64, "parallelism": "tp", "devices": 2}),
]

_ONE = """
import json, sys
import torch, torch._dynamo  # imported first, as in advisor's warm fork server
from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialSettings
from advisor.trial.entry import run_trial
from advisor.trial.process import mark_forked
from advisor.workload.contract import load_workload
mark_forked(True)  # the estimate runs in a fork of this process, as in a study
path, knobs = sys.argv[1], json.loads(sys.argv[2])
settings = TrialSettings(train_samples=1024, max_timing_s=1.0, part="probe")
payload = TrialPayload.of(load_workload(path), TrialConfig(**knobs), settings, estimate=True)
r = run_trial(payload)
tracked = None
if payload.config.parallelism in ("single", "ddp"):  # the same steps on real tensors, tracked alike
    from advisor.trial.estimate import estimate_here
    tracked = estimate_here(payload, fake=False)["peak_bytes"]
print("RESULT " + json.dumps({"ok": r.ok, "failure": r.failure_message, "measured": r.peak_memory_bytes,
                              "estimate": r.memory_estimate, "tracked": tracked}))
"""


def run_case(example: str, knobs: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", _ONE, str(REPO / "examples" / example), json.dumps(knobs)],
                         capture_output=True, text=True, timeout=900, cwd=REPO, check=False)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        return {"ok": False, "failure": out.stderr[-800:]}
    return json.loads(line[len("RESULT "):])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(HERE / "results" / "memory_estimate.json"))
    args = parser.parse_args()
    rows = []
    for example, knobs in CASES:
        runs = [run_case(example, knobs) for _ in range(args.repeats)]
        good = [r for r in runs if r["ok"] and r.get("measured") and (r.get("estimate") or {}).get("peak_bytes")]
        row = {"example": example, "config": knobs, "runs": runs}
        if good:
            measured = statistics.median(r["measured"] for r in good)
            estimate = statistics.median(r["estimate"]["peak_bytes"] for r in good)
            row |= {"measured_bytes": measured, "estimate_bytes": estimate, "error": estimate / measured - 1,
                    "estimate_s": statistics.median(r["estimate"]["seconds"] for r in good),
                    "by_kind": good[0]["estimate"]["by_kind"]}
            if good[0].get("tracked"):
                tracked = statistics.median(r["tracked"] for r in good)
                row |= {"tracked_bytes": tracked, "error_vs_tracked": estimate / tracked - 1}
        else:
            row["unavailable"] = [(r.get("estimate") or {}).get("unavailable") or r.get("failure") for r in runs]
        rows.append(row)
        tracked = (f"  tensors {row['tracked_bytes'] / 2**20:6.1f} MiB ({row['error_vs_tracked']:+.1%})"
                   if "tracked_bytes" in row else "")
        print(f"{example:14s} {json.dumps(knobs):60s} "
              + (f"measured {row['measured_bytes'] / 2**20:6.1f} MiB  estimate {row['estimate_bytes'] / 2**20:6.1f} MiB"
                 f"  error {row['error']:+.0%}  ({row['estimate_s']:.1f} s){tracked}" if "error" in row
                 else f"no estimate: {row['unavailable'][0]}"), flush=True)
    errors = [abs(r["error"]) for r in rows if "error" in r]
    vs_tracked = [abs(r["error_vs_tracked"]) for r in rows if "error_vs_tracked" in r]
    doc = {"date": time.strftime("%Y-%m-%d"), "commit": commit(),
           "command": f"python benchmarks/memory_estimate.py --repeats {args.repeats}",
           "device": "cpu", "repeats": args.repeats, "rows": rows,
           "median_abs_error": statistics.median(errors) if errors else None,
           "max_abs_error": max(errors) if errors else None,
           "median_error": statistics.median(r["error"] for r in rows if "error" in r) if errors else None,
           "estimated": len(errors), "cases": len(rows),
           "max_abs_error_vs_tracked": max(vs_tracked) if vs_tracked else None, "tracked_cases": len(vs_tracked)}
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"median |error| {doc['median_abs_error']:.0%}, max {doc['max_abs_error']:.0%}, median error "
          f"{doc['median_error']:+.0%} over {len(errors)} of {len(rows)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
