"""Robustness smoke: run N random configurations of a space for real (in this process,
short trials) and list every failure, to find knob combinations that break.

    python benchmarks/combinations.py examples/digits_cnn.py --space cpu -n 60
    python benchmarks/combinations.py examples/digits_inference.py --workload inference -n 60

Combinations that cannot work by design are skipped (``advisor.techniques.conflicts``);
any other failure is a bug or a missing conflict rule. Not a timing benchmark: trials are
short and share this process (compile caches, threads), so only pass/fail means anything.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys

from advisor.hardware import detect
from advisor.space import filter_space, load_space
from advisor.techniques import conflicts
from advisor.trial import TrialSettings, run_trial
from advisor.workload import load_workload, preflight


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--workload", default="train", choices=("train", "inference"))
    ap.add_argument("--space", help="default: default (train) or inference")
    ap.add_argument("-n", type=int, default=40, help="configurations to run")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    workload = load_workload(args.model)
    facts = {"workload": args.workload} | preflight(workload)
    space = filter_space(load_space(args.space or ("inference" if args.workload == "inference" else "default")),
                         detect(), facts)
    configs = [c for c in space.configs(limit=500_000) if not conflicts(c)]
    random.Random(args.seed).shuffle(configs)
    settings = TrialSettings(train_samples=320, max_timing_s=0.3, min_steps=3, workload=args.workload).to_dict()
    failures: collections.Counter[str] = collections.Counter()
    for cfg in configs[: args.n]:
        result = run_trial({"config": cfg.to_dict(), "settings": settings, "workload_path": str(workload.path),
                            "workload_source": workload.source, "workload_sha256": workload.sha256})
        if not result["ok"]:
            first = (result["failure_message"] or "").splitlines()[0][:200]
            failures[first] += 1
            changed = {k: v for k, v in cfg.to_dict().items() if v != getattr(type(cfg)(), k)}
            print(f"FAILED [{result['failure_class']}] {changed}: {first}", flush=True)
    print(f"ran {min(args.n, len(configs))} configurations of {len(configs)}; {sum(failures.values())} failed")
    for message, count in failures.most_common():
        print(f"  {count} x {message}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
