"""Robustness smoke: run N random configurations of a space for real (in this process,
short trials) and list every failure, to find knob combinations that break.

    python benchmarks/combinations.py examples/digits_cnn.py --space cpu -n 60
    python benchmarks/combinations.py examples/digits_inference.py --workload inference -n 60

Combinations that cannot work by design are skipped (``advisor.techniques.rules.conflicts``);
any other failure is a bug or a missing conflict rule. Not a timing benchmark: trials are
short and share this process (compile caches, threads), so only pass/fail means anything.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys

from advisor.core.results import TrialPayload, TrialSettings
from advisor.core.units import first_line
from advisor.machine.hardware import detect
from advisor.search.space import filter_space, load_space
from advisor.techniques.rules import conflicts
from advisor.trial.entry import run_trial
from advisor.workload.contract import load_workload
from advisor.workload.preflight import preflight


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
    settings = TrialSettings(train_samples=320, max_timing_s=0.3, min_steps=3, workload=args.workload)
    failures: collections.Counter[str] = collections.Counter()
    for cfg in configs[: args.n]:
        result = run_trial(TrialPayload.of(workload, cfg, settings))
        if not result.ok:
            first = first_line(result.failure_message, 200)
            failures[first] += 1
            print(f"FAILED [{result.failure_class}] {cfg.changed()}: {first}", flush=True)
    print(f"ran {min(args.n, len(configs))} configurations of {len(configs)}; {sum(failures.values())} failed")
    for message, count in failures.most_common():
        print(f"  {count} x {message}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
