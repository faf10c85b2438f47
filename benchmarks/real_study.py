"""Two-stage evaluation on a real study: does the new default find a configuration as fast
as the previous default's best, on the same wall-time budget, sooner?

Two real studies of examples/char_lm.py (a decoder-only character LM, whose training run is
tens of times its probe) run at the same time, each with its own embedded Ray and SQLite
and pinned to its own half of this machine's CPUs (one core each here), so whatever drift
the machine has during the run it has for both (the interleaving). Unpinned, the two
studies' trials oversubscribed the cores and a probe measured while the other study
trained ran 5-10x slower than one measured while it did not: no comparison at all.

A  the previous default, full trials: `advisor tune MODEL --train all --trials 24`;
B  the new default, two-stage evaluation: `advisor tune MODEL --trials 24`, stopped (SIGINT,
   as a user's Ctrl-C) if it still runs when A's search ends: at most A's wall time.

The same --trials gives both the same one-knob seeds (a third of --trials, at most 8: 24
gives all 8), so the comparison is of how each evaluates configurations, not of which it
proposes first. (A first run gave B --trials 500 and A's wall time: B then had 8 seeds to
A's 6, and its best came from a seed A never ran.)

Both with --no-confirm, --seed 0 and the same --train-samples; then both confirmed at once
(`advisor confirm`, default pairs), so the front and the picks rest on paired ratios.

Figures (results/real_study.json; summary.json `search.real_time_to_best_ratio`):
- each study's fastest pick: its confirmed throughput ratio and interval, and when (from
  the study's first trial) that trial finished;
- t_A: when A's fastest pick finished; t_B: when B first finished a feasible trial other
  than the baseline whose ratio (confirmed where it was) is at least A's fastest pick's;
- search.real_time_to_best_ratio = t_B / t_A (target <= 1/3, as for the replayed grids);
  None when B found nothing as fast in its budget (then B's own best and when it came are
  what to read);
- beside it: each study's search wall time for its --trials configurations (B's / A's is
  what two-stage evaluation costs per configuration on this model).

    python benchmarks/real_study.py [--trials 24] [--train-samples 8192]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import HERE, commit

REPO = HERE.parent
MODEL = REPO / "examples" / "char_lm.py"


def halves() -> tuple[set[int], set[int]]:
    """This process's CPUs, split in two."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("real_study.py needs at least 2 CPUs: one half for each study")
    return set(cpus[:len(cpus) // 2]), set(cpus[len(cpus) // 2:])


def start(args: list[str], ray_dir: Path, log: Path, cpus: set[int]) -> subprocess.Popen[bytes]:
    """`advisor ARGS` in its own process pinned to ``cpus`` (its Ray and trials inherit it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")}
    env["ADVISOR_RAY_DIR"] = str(ray_dir)  # one embedded Ray each
    with open(log, "wb") as fh:
        return subprocess.Popen([sys.executable, "-m", "advisor", *args], cwd=REPO, env=env, stdout=fh,
                                stderr=subprocess.STDOUT, preexec_fn=lambda: os.sched_setaffinity(0, cpus))


def study_figures(url: str, name: str) -> dict[str, Any]:
    """Per trial that has a metric: when it finished (from the study's first trial's start),
    whether it is feasible, its ratio (confirmed where it was); the fastest pick; counts."""
    import optuna

    from advisor.core.picks import pick
    from advisor.core.stored import read_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    frozen = optuna.load_study(study_name=name, storage=url)
    started = min(t.datetime_start.timestamp() for t in frozen.trials if t.datetime_start is not None)
    study = read_study(frozen)
    trials = []
    for r in study.records:
        if r.state != "complete" or r.figures is None or r.finished_at is None:
            continue
        vs = study.versus_baseline(r)
        trials.append({"trial": r.number, "baseline": r.baseline, "config": r.description,
                       "at_s": r.finished_at - started,
                       "feasible": r.feasible, "ratio": vs.throughput_ratio, "confirmed": vs.confirmed,
                       "interval": vs.throughput_interval, "accuracy": r.figures.score})
    best = pick(study, "fastest")
    vs = study.versus_baseline(best)
    states: dict[str, int] = {}
    for r in study.records:
        states[r.state] = states.get(r.state, 0) + 1
    return {"trials": sorted(trials, key=lambda t: t["at_s"]), "states": states,
            "with_metric": len(trials), "accuracy_runs_of_probed": sum(1 for r in study.records if r.get("accuracy_run")),
            "best": {"trial": best.number, "config": best.description, "ratio": vs.throughput_ratio,
                     "interval": vs.throughput_interval, "confirmed": vs.confirmed,
                     "at_s": (best.finished_at or started) - started}}


def time_to_reach(trials: list[dict[str, Any]], ratio: float) -> float | None:
    """When the first feasible trial other than the baseline at or above ``ratio`` finished."""
    return next((t["at_s"] for t in trials if t["feasible"] and not t["baseline"] and t["ratio"] is not None
                 and t["ratio"] >= ratio), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(MODEL))
    parser.add_argument("--trials", type=int, default=24, help="both studies' --trials (B: at most A's wall time)")
    parser.add_argument("--train-samples", type=int, default=8192)
    parser.add_argument("--out", default=str(HERE / "results" / "real_study.json"))
    args = parser.parse_args()
    common = [args.model, "--seed", "0", "--train-samples", str(args.train_samples), "--no-confirm", "--no-tui"]
    with tempfile.TemporaryDirectory(prefix="advisor-real-") as tmp:
        root = Path(tmp)
        cpus = dict(zip("ab", halves(), strict=True))
        urls = {k: f"sqlite:///{root / f'{k}.db'}" for k in "ab"}
        t0 = time.monotonic()
        a = start(["tune", *common, "--train", "all", "--trials", str(args.trials), "--storage", urls["a"],
                   "--study", "all"], root / "ray-a", root / "a.log", cpus["a"])
        b = start(["tune", *common, "--trials", str(args.trials), "--storage", urls["b"], "--study", "selective"],
                  root / "ray-b", root / "b.log", cpus["b"])
        print(f"A (--train all, {args.trials} trials) and B (selective) started", flush=True)
        walls: dict[str, float] = {}
        while len(walls) < 2:  # each study's search wall time
            for key, proc in (("a", a), ("b", b)):
                if key not in walls and proc.poll() is not None:
                    walls[key] = time.monotonic() - t0
            time.sleep(0.2)
            if "a" in walls and "b" not in walls:
                b.send_signal(signal.SIGINT)  # B's budget: at most A's wall time
                b.wait()
        a_rc, b_rc = a.returncode, b.returncode
        search_s = walls["a"]
        print(f"   searches: A {search_s:.0f} s (exit {a_rc}), B {walls['b']:.0f} s (exit {b_rc}); confirming both ...",
              flush=True)
        t1 = time.monotonic()
        confirms = [start(["confirm", "--storage", urls[k], "--study", name], root / f"ray-{k}c", root / f"{k}c.log",
                          cpus[k])
                    for k, name in (("a", "all"), ("b", "selective"))]
        confirm_rcs = [p.wait() for p in confirms]
        confirm_s = time.monotonic() - t1
        logs = {p.stem: p.read_text(errors="replace")[-4000:] for p in sorted(root.glob("*.log"))}
        if a_rc != 0 or any(confirm_rcs):
            print(json.dumps(logs, indent=1))
            return 1
        fa, fb = study_figures(urls["a"], "all"), study_figures(urls["b"], "selective")
    best_a = fa["best"]
    bar = best_a["ratio"]
    t_a, t_b = best_a["at_s"], time_to_reach(fb["trials"], bar)
    result = {
        "date": dt.date.today().isoformat(), "commit": commit(), "command": "python benchmarks/real_study.py "
        f"--trials {args.trials} --train-samples {args.train_samples}", "model": os.path.relpath(args.model, REPO),
        "train_samples": args.train_samples, "trials": args.trials, "cpus": {k: sorted(v) for k, v in cpus.items()},
        "search_wall_s": search_s, "search_wall_b_s": walls["b"], "wall_ratio": walls["b"] / walls["a"], "confirm_wall_s": confirm_s,
        "bar": bar, "t_a_s": t_a, "t_b_s": t_b,
        "real_time_to_best_ratio": t_b / t_a if t_b is not None and t_a > 0 else None, "target": 1 / 3,
        "a": fa, "b": fb, "exit": {"a": a_rc, "b": b_rc, "confirm": confirm_rcs}, "logs": logs,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("search_wall_s", "search_wall_b_s", "wall_ratio", "bar", "t_a_s", "t_b_s",
                                             "real_time_to_best_ratio")}))
    print("A best", best_a, "\nB best", fb["best"], "\nstates A", fa["states"], "B", fb["states"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
