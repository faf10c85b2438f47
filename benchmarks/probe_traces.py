"""Record probes' raw step times, for replaying stopping rules offline (``probe_stopping.py``).

Each (example, configuration) runs as a probe in a fresh process, as a trial does (model.py
loaded, the knobs applied, the probe's loop), but with no warm-up wait and no stopping: it
times every step after the fingerprint's steps for ``--seconds`` seconds, in blocks of
about ``--block-ms`` milliseconds (instrumentation: the benchmark swaps in a StepTimer
that never settles and pools finely). Each is repeated ``--repeats`` times, in separate
processes, so that a replay can compare a probe's error with the spread between processes.

    python benchmarks/probe_traces.py                    # all cases, 3 repeats, 3 s each
    python benchmarks/probe_traces.py --cases mlp-bs32 --repeats 1 --seconds 1   # proves it runs
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
sys.path.insert(0, str(HERE))
from common import commit  # noqa: E402

CASES = {  # name: (example, workload, configuration)
    "mlp-bs32": ("digits_mlp.py", "train", {"batch_size": 32}),
    "mlp-bs256": ("digits_mlp.py", "train", {"batch_size": 256}),
    "mlp-threads1": ("digits_mlp.py", "train", {"batch_size": 32, "threads": 1}),
    "mlp-compile": ("digits_mlp.py", "train", {"batch_size": 32, "compile": True}),
    "cnn-bs64": ("digits_cnn.py", "train", {"batch_size": 64}),
    "cnn-channels-last": ("digits_cnn.py", "train", {"batch_size": 64, "channels_last": True}),
    "cnn-bf16": ("digits_cnn.py", "train", {"batch_size": 64, "precision": "bf16"}),
    "cnn-compile": ("digits_cnn.py", "train", {"batch_size": 64, "compile": True}),
    "charlm-bs32": ("char_lm.py", "train", {"batch_size": 32}),
    "charlm-bf16": ("char_lm.py", "train", {"batch_size": 32, "precision": "bf16"}),
    "infer-bs256": ("digits_inference.py", "inference", {"batch_size": 256}),
    "infer-bs16": ("digits_inference.py", "inference", {"batch_size": 16}),
}


def one(example: str, workload: str, config: dict, seconds: float, block_ms: float) -> dict:
    """In this process: the probe's loop with a recording timer; its blocks and phases."""
    import advisor.trial.loop as loop
    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.machine.timing import StepTimer
    from advisor.trial.single import run_in_this_process
    from advisor.workload.contract import load_workload

    kept: list[StepTimer] = []

    class Recording(StepTimer):  # instrumentation: fine blocks, never settles, counters kept
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.block_s, self.min_blocks = block_ms / 1000, 10**9
            kept.append(self)

    loop.StepTimer = Recording
    started = time.perf_counter()
    path = EXAMPLES / example
    settings = TrialSettings(train_samples=10**6, part="probe", warmup_steps=0, warmup_s=0.0, max_timing_s=seconds,
                             workload=workload)
    payload = TrialPayload.of(load_workload(path), TrialConfig(**config), settings)
    result = run_in_this_process(payload, started)
    if not result.ok:
        raise SystemExit(f"{example} {config}: {result.error}")
    timer = kept[-1]
    return {"blocks_s": timer.samples, "steps_per_block": timer._per_block, "first_step_s": result.first_step_s,
            "phase_s": result.phase_s, "scores": (timer.interference() or {}).get("scores")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--block-ms", type=float, default=5.0)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child: the case to record
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "probe_traces.json"))
    args = ap.parse_args()
    if args.one:
        example, workload, config = CASES[args.one]
        print(json.dumps(one(example, workload, config, args.seconds, args.block_ms)))
        return 0
    traces: dict[str, list] = {name: [] for name in args.cases}
    for r in range(args.repeats):  # the cases alternate, so a slow spell of the machine hits all of them
        for name in args.cases:
            out = subprocess.run([sys.executable, __file__, "--one", name, "--seconds", str(args.seconds),
                                  "--block-ms", str(args.block_ms)], capture_output=True, text=True,
                                 env=os.environ | {"PYTHONWARNINGS": "ignore"})
            if out.returncode != 0:
                raise SystemExit(f"{name}: {out.stderr[-2000:]}")
            traces[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"repeat {r} {name}: {len(traces[name][-1]['blocks_s'])} blocks", file=sys.stderr)
    doc = {"what": "probes' raw block times (fine blocks, no warm-up wait, no stopping), each case repeated in "
                   "fresh processes", "command": "python benchmarks/probe_traces.py " + " ".join(sys.argv[1:]),
           "date": dt.date.today().isoformat(), "commit": commit(), "seconds": args.seconds,
           "block_ms": args.block_ms, "cases": {n: {"example": CASES[n][0], "workload": CASES[n][1],
                                                    "config": CASES[n][2], "runs": traces[n]} for n in traces}}
    Path(args.output).write_text(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
