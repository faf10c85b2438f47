"""How far a CPU trial's peak memory ratio moves between sittings, against within one.

A *sitting* here is a fresh Python process with its own fork server (as each `advisor tune`
or `advisor confirm` has); in it the baseline and one other configuration (batch size
128) run as probes, alternately, ``--rounds`` times each, every run in a fresh trial
process forked from that server, exactly as tune and confirmation run them. The figure
is the peak resident memory above the pre-model baseline (``advisor.machine.memory``).

Per model: each sitting's mean log ratio (other / baseline), the within-sitting SD of the
pairs' log ratios (what one sitting's confirmation interval sees) and the between-sitting
SD of the sitting means (what a second run meets). ``advisor.core.pairs.RESIDENT_LOG_SD``
floors every CPU memory interval from these.

    python benchmarks/memory_sittings.py [--sittings 5] [--rounds 3]   # ~2 min for both examples
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import subprocess
import sys
import time

from common import HERE, commit

REPO = HERE.parent
MODELS = ("digits_mlp", "digits_cnn")

ONE_SITTING = """
import json, sys
from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialSettings
from advisor.trial import forkserver
from advisor.workload.contract import load_workload
w = load_workload(sys.argv[1])
base = TrialConfig.from_dict(w.baseline)
runs = []
for _ in range(int(sys.argv[2])):
    for c in (base, base.replace(batch_size=128)):
        r = forkserver.run_forked(TrialPayload.of(w, c, TrialSettings(train_samples=256, part="probe")))
        assert r.ok, r.failure_message
        runs.append(r.peak_memory_bytes)
print(json.dumps(runs))
"""


def sitting(model: str, rounds: int) -> list[tuple[int, int]]:
    """One sitting's (baseline, other) peaks, in the order they ran."""
    out = subprocess.run([sys.executable, "-c", ONE_SITTING, str(REPO / "examples" / f"{model}.py"), str(rounds)],
                         capture_output=True, text=True, cwd=REPO, check=True, timeout=600)
    runs = json.loads(out.stdout.strip().splitlines()[-1])
    return list(zip(runs[::2], runs[1::2]))


def summarise(sittings: list[list[tuple[int, int]]]) -> dict:
    logs = [[math.log(b / a) for a, b in s] for s in sittings]
    means = [statistics.fmean(x) for x in logs]
    within = math.sqrt(statistics.fmean([statistics.variance(x) for x in logs if len(x) > 1]))
    return {"sitting_ratios": [math.exp(m) for m in means], "within_log_sd": within,
            "between_log_sd": statistics.stdev(means) if len(means) > 1 else None,
            "peaks_bytes": [[list(p) for p in s] for s in sittings]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sittings", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "memory_sittings.json"))
    args = ap.parse_args()
    started = time.monotonic()
    found = {}
    for model in args.models:
        runs = [sitting(model, args.rounds) for _ in range(args.sittings)]
        found[model] = summarise(runs)
        f = found[model]
        print(f"{model}: sitting ratios {', '.join(f'{r:.2f}' for r in f['sitting_ratios'])}; log SD within "
              f"{f['within_log_sd']:.3f}, between {f['between_log_sd']:.3f}", flush=True)
    doc = {"what": "a CPU memory ratio (batch size 128 / the baseline) within and between sittings",
           "command": "python benchmarks/memory_sittings.py " + " ".join(sys.argv[1:]),
           "date": dt.date.today().isoformat(), "commit": commit(), "wall_s": time.monotonic() - started,
           "sittings": args.sittings, "rounds": args.rounds, "models": found}
    with open(args.output, "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
