"""Can a user act on the figures? Three real studies of README command 1's model:

A  `advisor tune MODEL --seed 0` (README command 1, in its own process),
B  the same with --seed 1 (an independent second run),
C  the same as A, in this process, with a CPU hog of this script's own running during
   trial 0 only (one busy process per core, started when trial 0 is submitted, killed
   when it finishes, at most HOG_LIMIT_S seconds).

Figures (benchmarks/results/trust.json; the headline keys go to summary.json):
- trust.pick_ratio_agreement: for the fastest and balanced picks, |ratio_A / ratio_B - 1|
  of their confirmed throughput ratios (the worst of the two), and whether A's and B's
  picks are the same configuration or within each other's interval;
- trust.disturbed_baseline_error: for configurations confirmed in both A and C, the worst
  |confirmed_C / confirmed_A - 1|; beside it the same for the unconfirmed single-trial
  ratio to trial 0 (what every figure rested on before confirmation);
- trust.confirm_share: confirmation's share of A's wall time;
- trust.ci_halfwidth: the median relative half-width of A's confirmed throughput intervals.

    python benchmarks/trust.py [--model examples/digits_cnn.py] [--trials 20] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import HERE, commit

REPO = HERE.parent
HOG_LIMIT_S = 300.0


def run_cli(model: str, trials: int, seed: int, url: str) -> dict[str, Any]:
    """README command 1 (plus --seed, --storage, --json) in its own process; its JSON
    summary and the wall time of the whole command."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")}
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "advisor", "tune", model, "--trials", str(trials), "--seed", str(seed),
                          "--storage", url, "--study", f"seed{seed}", "--json", "--no-tui"],
                         capture_output=True, text=True, env=env, cwd=REPO, check=True)
    summary = json.loads(out.stdout)
    summary["command_wall_s"] = time.monotonic() - started
    return summary


def run_disturbed(model: str, trials: int, url: str) -> dict[str, Any]:
    """Study C in this process: a CPU hog during trial 0 only."""
    from advisor.core.events import Finished, Paired, Submitted
    from advisor.study.options.tune_options import TuneOptions
    from advisor.study.run.plan import plan_study
    from advisor.study.run.tuner import Tuner

    hogs: list[subprocess.Popen[bytes]] = []
    hog_s = {"start": 0.0, "end": 0.0}
    confirm_s = [0.0]

    def stop_hogs() -> None:
        for h in hogs:
            h.kill()
            h.wait()
        if hogs and not hog_s["end"]:
            hog_s["end"] = time.monotonic()
        hogs.clear()

    def on_event(event: Any) -> None:
        if isinstance(event, Submitted) and event.number == 0 and not hog_s["start"]:
            hog_s["start"] = time.monotonic()
            hogs.extend(subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1))
            threading.Timer(HOG_LIMIT_S, stop_hogs).start()
        elif isinstance(event, Finished) and event.number == 0:
            stop_hogs()
        elif isinstance(event, Paired):
            confirm_s[0] += event.wall_s

    options = TuneOptions(workload_path=model, trials=trials, seed=0, storage=url, study_name="disturbed")
    started = time.monotonic()
    try:
        Tuner(plan_study(options), on_event=on_event).run()
    finally:
        stop_hogs()
    return {"wall_s": time.monotonic() - started, "confirm_s": confirm_s[0],
            "hog_s": hog_s["end"] - hog_s["start"], "hog_processes": os.cpu_count() or 1}


def study_figures(url: str, name: str) -> dict[str, Any]:
    """Per completed trial: its configuration, confirmed interval (if any), and its raw
    single-trial throughput ratio to trial 0; the picks."""
    import optuna

    from advisor.core.picks import pick
    from advisor.core.stored import read_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = read_study(optuna.load_study(study_name=name, storage=url))
    base = study.baseline
    assert base is not None and base.figures is not None
    trials = {}
    for r in study.records:
        if r.state != "complete" or r.config is None:
            continue
        vs = study.versus_baseline(r)
        trials[r.config.key()] = {
            "trial": r.number, "config": r.description, "raw_ratio": r.figures.throughput / base.figures.throughput,
            "shown_ratio": vs.throughput_ratio, "confirmed": vs.confirmed, "interval": vs.throughput_interval,
            "memory_ratio": vs.memory_ratio, "memory_interval": vs.memory_interval,  # what balanced weighs too
            "pairs": vs.pairs}
    picks = {}
    for how in ("fastest", "balanced"):
        r = pick(study, how)
        picks[how] = r.config.key() if r.config is not None else None
    return {"trials": trials, "picks": picks, "baseline_measurements": study.attrs.get("baseline_measurements"),
            "accuracy_noise": study.attrs.get("accuracy_noise"),
            "baseline_disturbed": study.attrs.get("baseline_disturbed")}


def agreement(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for how in ("fastest", "balanced"):
        ta, tb = a["trials"][a["picks"][how]], b["trials"][b["picks"][how]]
        same = a["picks"][how] == b["picks"][how]
        within = (ta["interval"] is not None and tb["interval"] is not None
                  and (tb["interval"][0] <= ta["shown_ratio"] <= tb["interval"][1]
                       or ta["interval"][0] <= tb["shown_ratio"] <= ta["interval"][1]))
        out[how] = {"a": ta, "b": tb, "same_config": same, "within_interval": within,
                    "ratio_error": abs(ta["shown_ratio"] / tb["shown_ratio"] - 1),
                    "both_confirmed": ta["confirmed"] and tb["confirmed"]}
    out["value"] = max(out[h]["ratio_error"] for h in ("fastest", "balanced"))
    out["picks_consistent"] = all(out[h]["same_config"] or out[h]["within_interval"] for h in ("fastest", "balanced"))
    return out


def disturbed_error(a: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    both = [k for k in a["trials"] if k in c["trials"] and a["trials"][k]["confirmed"] and c["trials"][k]["confirmed"]]
    rows = [{"config": a["trials"][k]["config"],
             "confirmed_error": abs(c["trials"][k]["shown_ratio"] / a["trials"][k]["shown_ratio"] - 1),
             "unconfirmed_error": abs(c["trials"][k]["raw_ratio"] / a["trials"][k]["raw_ratio"] - 1)} for k in both]
    return {"configs": rows, "value": max((r["confirmed_error"] for r in rows), default=None),
            "unconfirmed_value": max((r["unconfirmed_error"] for r in rows), default=None)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(REPO / "examples" / "digits_cnn.py"))
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--out", default=str(HERE / "results" / "trust.json"))
    parser.add_argument("--keep", metavar="DIR", help="keep the three studies' databases (a.db, b.db, c.db) in DIR, "
                        "to read them again (picks under other rules, `advisor report`); default: a temporary folder")
    args = parser.parse_args()
    if args.keep:  # absolute: study A and B run with the repository as their working directory
        args.keep = str(Path(args.keep).resolve())
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="advisor-trust-")) as tmp:
        urls = {k: f"sqlite:///{Path(tmp) / f'{k}.db'}" for k in "abc"}
        print("A: README command 1 (seed 0) ...", flush=True)
        run_a = run_cli(args.model, args.trials, 0, urls["a"])
        print(f"   {run_a['command_wall_s']:.0f} s; B: seed 1 ...", flush=True)
        run_b = run_cli(args.model, args.trials, 1, urls["b"])
        print(f"   {run_b['command_wall_s']:.0f} s; C: a CPU hog during trial 0 ...", flush=True)
        run_c = run_disturbed(args.model, args.trials, urls["c"])
        print(f"   {run_c['wall_s']:.0f} s", flush=True)
        a, b, c = study_figures(urls["a"], "seed0"), study_figures(urls["b"], "seed1"), study_figures(urls["c"], "disturbed")
    halfwidths = [(t["interval"][1] - t["interval"][0]) / (2 * t["shown_ratio"]) for t in a["trials"].values()
                  if t["confirmed"] and t["interval"] and t["interval"][1] is not None]
    result = {
        "date": dt.date.today().isoformat(), "commit": commit(), "command": "python benchmarks/trust.py",
        "model": args.model, "trials": args.trials,
        "pick_ratio_agreement": agreement(a, b),
        "disturbed_baseline_error": disturbed_error(a, c),
        "confirm_share": run_a["timing"]["confirm_s"] / run_a["timing"]["wall_s"],
        "ci_halfwidth": statistics.median(halfwidths) if halfwidths else None,
        "readme_command_1_wall_s": run_a["command_wall_s"],
        "runs": {"a": {"timing": run_a["timing"], "counts": run_a["counts"], "study": a},
                 "b": {"timing": run_b["timing"], "counts": run_b["counts"], "study": b},
                 "c": {**run_c, "study": c}},
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("confirm_share", "ci_halfwidth", "readme_command_1_wall_s")}, indent=1))
    print("pick_ratio_agreement", result["pick_ratio_agreement"]["value"],
          "consistent", result["pick_ratio_agreement"]["picks_consistent"])
    print("disturbed_baseline_error", result["disturbed_baseline_error"]["value"],
          "unconfirmed", result["disturbed_baseline_error"]["unconfirmed_value"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
