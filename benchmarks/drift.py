"""Why two studies confirm the same configuration at different ratios: does the level come
from the trial processes' lineage (one fork server per Ray worker, so per study) or from
the machine's state over time? Real probes of the example's baseline and of bf16, run by
advisor's own trial processes, in two designs:

- sequential: ``--blocks`` fresh local Rays one after another (each its own Ray worker and
  fork server, as each study has), ``--n`` alternations of the two probes in each;
- interleaved: ``--blocks`` long-lived host processes, each with a fork server of its own,
  their probes interleaved in time (host 1, host 2, ... then back), ``--n`` of each probe
  per host.

If the lineage set the level, the interleaved hosts would differ as the sequential blocks
do; if time does, the interleaved hosts agree and the sequential blocks do not.

    python benchmarks/drift.py            # ~2 min on 2 cores
    python benchmarks/drift.py --tiny     # proves it runs
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import commit  # noqa: E402


def _host(conn) -> None:
    """A stand-in for a Ray worker: its own fork server, one trial at a time on request."""
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))  # as Ray sets it for a whole-node trial
    from advisor.trial.forkserver import run_forked

    while (payload := conn.recv()) is not None:
        conn.send(run_forked(payload).throughput)


def _block(label: str, base: list[float], cand: list[float]) -> dict:
    row = {"block": label, "base": base, "bf16": cand, "base_median": statistics.median(base),
           "bf16_median": statistics.median(cand)}
    row["ratio"] = row["bf16_median"] / row["base_median"]
    print(f"{label}: baseline {row['base_median']:,.0f} samples/s ({min(base):,.0f}-{max(base):,.0f}), bf16 "
          f"{row['bf16_median']:,.0f} ({min(cand):,.0f}-{max(cand):,.0f}), ratio {row['ratio']:.3f}", flush=True)
    return row


def _spread(rows: list[dict]) -> dict:
    """How far the blocks' levels and ratios sit apart (sd of their logs), against the
    spread of single probes within a block (the median block's sd of log throughput)."""
    def sd(xs: list[float]) -> float:
        return statistics.stdev(math.log(x) for x in xs) if len(xs) > 1 else 0.0
    return {"between_blocks_log_sd_base": sd([r["base_median"] for r in rows]),
            "between_blocks_log_sd_ratio": sd([r["ratio"] for r in rows]),
            "within_block_log_sd_base": statistics.median(sd(r["base"]) for r in rows),
            "ratio_range": [min(r["ratio"] for r in rows), max(r["ratio"] for r in rows)]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(HERE.parent / "examples" / "digits_cnn.py"))
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--n", type=int, default=5, help="probes of each configuration per block")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "drift.json"))
    args = ap.parse_args()
    if args.tiny:
        args.blocks, args.n = 2, 2

    import optuna

    from advisor.core.config import TrialConfig
    from advisor.core.results import TrialPayload, TrialSettings
    from advisor.machine.hardware import detect, fingerprint
    from advisor.runner.executor import run_one
    from advisor.runner.ray_executor import RayExecutor
    from advisor.study.confirmation.pairing import probe_settings
    from advisor.workload.contract import load_workload

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    hw = detect()
    workload = load_workload(args.model)
    base = TrialConfig.from_dict(workload.baseline)
    configs = {"base": base, "bf16": replace(base, precision="bf16")}
    settings = probe_settings(TrialSettings(train_samples=300, device=hw.device))

    def order(i: int) -> list[str]:  # A B, then B A: neither always runs first
        return ["base", "bf16"] if i % 2 == 0 else ["bf16", "base"]

    sequential, number = [], 0
    for b in range(args.blocks):
        got: dict[str, list[float]] = {"base": [], "bf16": []}
        executor = RayExecutor(hw.device).start()
        try:
            for i in range(args.n):
                for name in order(i):
                    r = run_one(executor, number, TrialPayload.of(workload, configs[name], settings), timeout=600)
                    number += 1
                    assert r.ok, r.failure_message
                    got[name].append(r.throughput)
        finally:
            executor.shutdown()
        sequential.append(_block(f"sequential {b + 1} (fresh Ray)", got["base"], got["bf16"]))

    ctx = mp.get_context("spawn")
    hosts = []
    for _ in range(args.blocks):
        mine, theirs = ctx.Pipe()
        process = ctx.Process(target=_host, args=(theirs,))
        process.start()
        hosts.append((mine, process))
    got_by_host: list[dict[str, list[float]]] = [{"base": [], "bf16": []} for _ in hosts]
    try:
        for i in range(args.n):
            for name in order(i):
                for h in (range(len(hosts)) if i % 2 == 0 else reversed(range(len(hosts)))):
                    hosts[h][0].send(TrialPayload.of(workload, configs[name], settings))
                    got_by_host[h][name].append(hosts[h][0].recv())
    finally:
        for conn, process in hosts:
            conn.send(None)
            process.join(timeout=30)
    interleaved = [_block(f"interleaved host {h + 1}", g["base"], g["bf16"]) for h, g in enumerate(got_by_host)]
    doc = {"what": "probe throughput of the baseline and bf16 in blocks: fresh Rays one after another, and "
                   "host processes (each its own fork server) interleaved in time",
           "command": " ".join(["python", *sys.argv]), "model": args.model, "date": dt.date.today().isoformat(),
           "commit": commit(), "hardware": fingerprint(hw), "cpus": os.cpu_count(), "n": args.n,
           "sequential": {"blocks": sequential, **_spread(sequential)},
           "interleaved": {"blocks": interleaved, **_spread(interleaved)}}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "blocks"} for k, v in doc.items()
                      if k in ("sequential", "interleaved")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
