"""Each parallel strategy against the example's baseline on this machine: throughput and peak
memory as paired ratios (interleaved with the baseline, each run a fresh process: `advisor
measure`), the metric after one full training run of the strategy, and the memory plan's
estimate next to the measured peak.

    python benchmarks/parallelism.py [--example examples/char_lm.py] [--pairs 6]

Writes results/parallelism.json. On this 2-core CPU every rank is a process of its own
sharing the two cores, and the ranks talk over gloo on loopback: the figures say what the
strategies cost here, not what they gain on GPUs with NVLink.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from common import HERE, commit

REPO = HERE.parent
STRATEGIES = {
    "baseline": {},  # against itself: the pairs' noise, and the baseline's own metric
    "ddp": {"parallelism": "ddp", "devices": 2},
    "fsdp": {"parallelism": "fsdp", "devices": 2},
    "tp": {"parallelism": "tp", "devices": 2},
    "pp-1f1b": {"parallelism": "pp", "devices": 2},
    "pp-gpipe-4": {"parallelism": "pp", "devices": 2, "pp_schedule": "gpipe", "pp_microbatches": 4},
}


def measure(example: Path, knobs: dict, pairs: int, baseline: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.yaml"
        config.write_text(yaml.safe_dump({**baseline, **knobs}))
        out = subprocess.run([str(Path(sys.executable).parent / "advisor"), "measure", str(example), "--config",
                              str(config), "--pairs", str(pairs), "--json"],
                             capture_output=True, text=True, cwd=REPO, timeout=3600, check=False)
    if out.returncode != 0:
        return {"error": out.stderr[-2000:]}
    return json.loads(out.stdout)


def _headline(found: dict) -> dict:
    """The paired ratios (median and 95% interval), the metric after one full run, the
    memory estimate against that run's measured peak."""
    if "error" in found:
        return {"error": found["error"]}
    c, full = found["confirmation"], found["full_run"] or {}
    out = {"pairs": c["throughput_ratio"]["n"]}
    for key in ("throughput_ratio", "memory_ratio"):
        out[key] = [c[key]["center"], c[key]["low"], c[key]["high"]]
    out["accuracy"] = full.get("score", full.get("accuracy"))  # measure --json 2 says score (1: accuracy)
    out["full_run_peak_bytes"] = full.get("peak_memory_bytes")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", default=str(REPO / "examples" / "char_lm.py"))
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--out", default=str(HERE / "results" / "parallelism.json"))
    args = parser.parse_args()
    example = Path(args.example).resolve()
    sys.path.insert(0, str(example.parent))
    baseline = dict(getattr(__import__(example.stem), "BASELINE", {}))
    rows = {}
    for name, knobs in STRATEGIES.items():
        started = time.perf_counter()
        found = measure(example, knobs, args.pairs, baseline)
        rows[name] = {"config": {**baseline, **knobs}, **_headline(found), "wall_s": time.perf_counter() - started,
                      "measured": found}
        print(name, json.dumps({k: v for k, v in rows[name].items() if k not in ("config", "measured")}), flush=True)
    base = rows["baseline"].get("accuracy")
    for row in rows.values():
        if base is not None and row.get("accuracy") is not None:
            row["accuracy_delta"] = row["accuracy"] - base
    doc = {"date": time.strftime("%Y-%m-%d"), "commit": commit(), "device": "cpu (2 cores)",
           "command": f"python benchmarks/parallelism.py --pairs {args.pairs}", "example": example.name,
           "baseline": baseline, "strategies": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
