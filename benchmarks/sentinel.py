"""How often a trial is run again for interference: quiet, and with a CPU-burning neighbour.

Each trial is a real probe of the example's baseline, run by the real executor (a fresh
trial process, its step timer reading the interference counters per block) with the
study's interference limit in its payload, and judged by the study's real rule
(``BaselineWatch.disturbed``: run again while too few clean blocks remain, at most
``RERUNS`` times, then the cleanest run is kept). Three phases, one after the other:

- quiet: nothing of ours beside the trials (the machine's other users stay: the load
  average before and after each phase is recorded);
- steady neighbour: one process spinning for the whole phase (one per CPU makes a
  2-CPU machine's OpenMP steps ~100x slower: a single trial then takes minutes);
- bursty neighbour: one spinning process per CPU, busy 0.5 s of every 2 s.

A loaded phase stops after ``--phase-cap-s`` seconds (the trials done by then count).

The re-run share is the share of trials run again at least once. Beside it, what the rule
before (the sentinel kernel's reading 1.30x off the study's median, either way) would have
said of the same first runs.

    python benchmarks/sentinel.py            # ~3-5 min on 2 cores
    python benchmarks/sentinel.py --tiny     # a few trials, to check it runs
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import commit  # noqa: E402

BURN = ("import time, sys\nperiod, busy = float(sys.argv[1]), float(sys.argv[2])\n"
        "while True:\n t = time.time()\n while time.time() - t < busy: pass\n"
        " if period > busy: time.sleep(period - busy)\n")


def neighbour(burn: tuple[int, float, float] | None) -> list[subprocess.Popen]:
    """``burn``: (processes, period s, busy s of each period) spinning; None: none."""
    if burn is None:
        return []
    processes, period, busy = burn
    return [subprocess.Popen([sys.executable, "-c", BURN, str(period), str(busy)]) for _ in range(processes)]


def phase(name: str, base: int, trials: int, executor, workload, config, settings, watch, old_judge,
          burn: tuple[int, float, float] | None, cap_s: float) -> dict:
    from advisor.core.interference import summary_of
    from advisor.core.noise import DISTURBED_AT, off_by, reading_of, sentinel_moved
    from advisor.core.results import TrialPayload
    from advisor.runner.executor import run_one

    load_before = os.getloadavg()[0]
    procs = neighbour(burn)
    rows, scores, started = [], [], time.perf_counter()
    try:
        for i in range(trials):
            if time.perf_counter() - started > cap_s:
                break
            number = base + i
            runs = []
            while True:
                payload = TrialPayload.of(workload, config, settings, interference_limit=watch.limit)
                r = run_one(executor, number * 10 + len(runs), payload, timeout=600)
                assert r.ok, r.failure_message
                reading, median = reading_of(r.telemetry), old_judge.median
                old = bool(reading and median and off_by(reading, median) > DISTURBED_AT)
                if not runs:
                    old_judge.add(reading)
                why, kept = watch.disturbed(number, r)
                scores += [x for x in (summary_of(r.telemetry) or {}).get("scores") or [] if x is not None]
                s = {k: v for k, v in (summary_of(r.telemetry) or {}).items() if k not in ("scores", "why")}
                runs.append({"throughput": r.throughput, "sentinel_s": reading, "old_rule_disturbed": old,
                             "sentinel_moved": sentinel_moved(r.telemetry), "why": why, "interference": s})
                if why is None:
                    break
            rows.append({"runs": runs, "kept_cleanest": "kept" in kept.telemetry, "throughput": kept.throughput})
            print(f"{name} trial {i + 1}/{trials}: {len(runs)} run(s), {kept.throughput:,.0f} samples/s, "
                  f"dropped {[x['interference'].get('dropped') for x in runs]} of "
                  f"{[x['interference'].get('blocks') for x in runs]} blocks", flush=True)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    first = [t["runs"][0] for t in rows]
    blocks = sum(x["interference"].get("blocks") or 0 for t in rows for x in t["runs"])
    dropped = sum(x["interference"].get("dropped") or 0 for t in rows for x in t["runs"])
    thr = [t["throughput"] for t in rows]
    trials = len(rows)
    median = statistics.median(scores) if scores else None
    return {"neighbour": None if burn is None else dict(zip(("processes", "period_s", "busy_s"), burn)),
            "trials": trials, "rerun_share": sum(len(t["runs"]) > 1 for t in rows) / trials,
            "runs": sum(len(t["runs"]) for t in rows), "kept_cleanest": sum(t["kept_cleanest"] for t in rows),
            "blocks": blocks, "dropped_block_share": dropped / blocks if blocks else None,
            "old_rule_rerun_share": sum(x["old_rule_disturbed"] for x in first) / trials,
            **moved_summary([x for t in rows for x in t["runs"]]),
            "block_score_median": median,
            "block_score_mad": statistics.median(abs(x - median) for x in scores) if scores else None,
            "throughput_median": statistics.median(thr),
            "throughput_cv": statistics.stdev(thr) / statistics.fmean(thr) if len(thr) > 1 else None,
            "limit_at_end": watch.limit, "load_average_before": load_before, "load_average_after": os.getloadavg()[0],
            "wall_s": time.perf_counter() - started, "rows": rows}


def moved_summary(runs: list[dict]) -> dict:
    """What ``sentinel_moved`` (the sentinel read more than ``DISTURBED_AT`` apart before and
    after the timed steps; confirmation's rule for every run until ba38779, now only where no
    block was scored: ``noise.moved_unscored``) says of these runs, and whether
    the runs it calls moved measured differently: the median throughput of those it calls
    moved over that of the others (1.0: no different)."""
    moved = [x["throughput"] for x in runs if x["sentinel_moved"]]
    still = [x["throughput"] for x in runs if not x["sentinel_moved"]]
    return {"sentinel_moved_share": len(moved) / len(runs) if runs else None,
            "sentinel_moved_throughput_vs_others": (statistics.median(moved) / statistics.median(still)
                                                    if moved and still else None)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(HERE.parent / "examples" / "digits_mlp.py"))
    ap.add_argument("--quiet", type=int, default=20, help="trials on the quiet machine")
    ap.add_argument("--loaded", type=int, default=10, help="trials under each neighbour (at most)")
    ap.add_argument("--phase-cap-s", type=float, default=60.0, help="a loaded phase stops after this long")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "sentinel.json"))
    args = ap.parse_args()
    if args.tiny:
        args.quiet, args.loaded, args.phase_cap_s = 3, 1, 20.0

    import optuna

    from advisor.core.config import TrialConfig
    from advisor.core.noise import SentinelJudge
    from advisor.core.results import TrialSettings
    from advisor.core.stop import Stop
    from advisor.machine.hardware import detect, fingerprint
    from advisor.runner.ray_executor import RayExecutor
    from advisor.study.confirmation.baseline_watch import RERUNS, BaselineWatch
    from advisor.study.confirmation.pairing import probe_settings
    from advisor.workload.contract import load_workload

    started = time.perf_counter()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    hw = detect()
    workload = load_workload(args.model)
    config = TrialConfig.from_dict(workload.baseline)
    settings = probe_settings(TrialSettings(train_samples=300, device=hw.device))
    study = optuna.create_study(directions=["maximize", "minimize", "maximize"])
    watch = BaselineWatch(study, workload, settings, config, None, Stop(), lambda e: None)
    old_judge = SentinelJudge()
    executor = RayExecutor(hw.device).start()
    try:
        run = (executor, workload, config, settings, watch, old_judge)
        phases = {"quiet": phase("quiet", 0, args.quiet, *run, None, float("inf"))}
        cpus = os.cpu_count() or 1
        for base, (name, burn) in enumerate((("steady_neighbour", (1, 1.0, 1.0)),
                                             ("bursty_neighbour", (cpus, 2.0, 0.5))), 1):
            phases[name] = phase(name, 1000 * base, args.loaded, *run, burn, args.phase_cap_s)
    finally:
        executor.shutdown()
    doc = {"what": "share of trials run again for interference (per-block counters, the study's MAD limit), "
                   "quiet and with a CPU-burning neighbour; the old sentinel rule on the same first runs beside it",
           "command": " ".join(["python", *sys.argv]), "model": args.model, "date": dt.date.today().isoformat(),
           "commit": commit(), "hardware": fingerprint(hw), "cpus": os.cpu_count(), "reruns_allowed": RERUNS,
           "probe": {"max_timing_s": settings.max_timing_s, "part": settings.part},
           "sentinel_rerun_share_quiet": phases["quiet"]["rerun_share"],
           "wall_s": time.perf_counter() - started, "phases": phases}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "phases"} | {
        "phases": {n: {k: v for k, v in p.items() if k != "rows"} for n, p in phases.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
