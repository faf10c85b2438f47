"""Two-stage evaluation against the previous default, on the clock: whole studies replayed
on a grid recorded with ``--parts`` (benchmarks/record_grid.py: each cell's full trial,
probe and training run, each with its wall time), through the real Tuner, with the
default strategy in both modes:

- ``selective`` (the default now): probe every configuration, training runs only where
  they may change the front, the early-stop gate;
- ``all`` (the previous default): one full trial per configuration.

The replay charges each answer its recorded wall time (benchmarks/replay.py), so a study's
hypervolume fraction (as benchmarks/search_efficiency.py scores it: each configuration
at its median over the full-trial repeats) can be read against the time it took.

    python benchmarks/two_stage.py                      # both grids, 10 seeds, 80 proposals
    python benchmarks/two_stage.py --tiny               # a few seconds: proves it runs

Figures (median over seeds, per grid): the time each mode needs to reach 95% of the grid's
hypervolume (``wall_ratio`` = selective / all; a mode that never reaches it within the
budget is charged its whole study), the hypervolume fraction selective reaches in 10% of
the time a full sweep of the grid takes (every cell's median full-trial wall time), and
hypervolume per proposal at 13 proposals for both modes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from search_efficiency import Scorer  # noqa: E402

from advisor.core.objectives import hypervolume  # noqa: E402

from common import commit  # noqa: E402

GRIDS = {"digits_cnn": ("grid_digits_cnn_cpu_parts.json", "digits_cnn.py"),
         "digits_mlp": ("grid_digits_mlp_cpu_parts.json", "digits_mlp.py")}
TARGET = 0.95


def replay(mode: str, seed: int, grid, grid_path: str, model: str, budget: int, max_drop: float,
           workdir: Path) -> tuple[list[tuple[float, str | None]], float, dict[str, int]]:
    """One study: (clock when each trial finished, its key if it has a metric) in trial
    order, the study's total replayed time, and its two-stage counts."""
    import optuna

    from advisor.core.stored import read_study
    from advisor.outputs.summary import counts
    from advisor.study.options.tune_options import TuneOptions
    from advisor.study.run.plan import plan_study
    from advisor.study.run.tuner import Tuner

    from replay import ReplayExecutor

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    options = TuneOptions(workload_path=model, space=grid_path, trials=budget, sampler="default", seed=seed,
                          storage=f"sqlite:///{workdir / f'{mode}-{seed}.db'}", max_metric_drop=max_drop,
                          train_samples=grid.doc["settings"]["train_samples"], study_name=f"{mode}-{seed}",
                          confirm=False, metric_seeds=3, train=mode)
    executor = ReplayExecutor(grid, seed=seed)
    stored = read_study(Tuner(plan_study(options), executor=executor).run().study)
    events = [(executor.finished_at.get(r.number, executor.clock),
               r.config.key() if r.state == "complete" and r.config is not None else None)
              for r in stored.records if r.counted]
    return sorted(events, key=lambda e: e[0]), executor.clock, counts(stored)


def hv_at(scorer: Scorer, events: list[tuple[float, str | None]], t: float) -> float:
    found = {k for at, k in events if at <= t and k in scorer.feasible}
    return hypervolume([scorer.loss(k) for k in found]) / scorer.grid_hv


def time_to(scorer: Scorer, events: list[tuple[float, str | None]], total: float, target: float) -> tuple[float, bool]:
    """When the study first holds ``target`` of the grid's hypervolume (total time if never)."""
    found: set[str] = set()
    for at, key in events:
        if key in scorer.feasible:
            found.add(key)  # type: ignore[arg-type]
            if hypervolume([scorer.loss(k) for k in found]) / scorer.grid_hv >= target - 1e-12:
                return at, True
    return total, False


def per_proposal(scorer: Scorer, events: list[tuple[float, str | None]], n: int) -> float:
    found = {k for _, k in events[:n] if k in scorer.feasible}
    return hypervolume([scorer.loss(k) for k in found]) / scorer.grid_hv


def one_grid(name: str, seeds: int, budget: int, max_drop: float) -> dict:
    from replay import Grid

    grid_file, model = GRIDS[name]
    grid = Grid.load(HERE / "data" / grid_file)
    if not grid.parts:
        raise SystemExit(f"{grid_file} was recorded without --parts: record it again "
                         f"(python benchmarks/record_grid.py examples/{model} --parts ...)")
    scorer = Scorer(grid, max_drop)
    sweep = sum(statistics.median(r["wall_s"] for r in runs) for runs in grid.runs.values())
    out: dict = {"grid": grid_file, "cells": len(grid.runs), "feasible_cells": len(scorer.feasible),
                 "full_sweep_s": sweep, "modes": {}}
    with tempfile.TemporaryDirectory(prefix="adv-2stage-") as tmp:
        for mode in ("selective", "all"):
            rows = []
            for seed in range(seeds):
                events, total, tally = replay(mode, seed, grid, str(HERE / "data" / Path(grid.doc["space"]).name),
                                              str(HERE.parent / "examples" / model), budget, max_drop, Path(tmp))
                reach, reached = time_to(scorer, events, total, TARGET)
                rows.append({"seed": seed, "study_s": total, "time_to_95_s": reach, "reached_95": reached,
                             "hv_at_10pct_sweep": hv_at(scorer, events, 0.10 * sweep),
                             "hv_at_13_proposals": per_proposal(scorer, events, 13),
                             "hv_final": hv_at(scorer, events, total), "counts": tally})
                print(f"{name} {mode:9s} seed {seed}: 95% at {reach:7.1f} s ({'reached' if reached else 'not reached'})"
                      f", study {total:7.1f} s, HV at 10% of a sweep {rows[-1]['hv_at_10pct_sweep']:.3f}", flush=True)
            med = {k: statistics.median(r[k] for r in rows)
                   for k in ("study_s", "time_to_95_s", "hv_at_10pct_sweep", "hv_at_13_proposals", "hv_final")}
            med["reached_95"] = sum(r["reached_95"] for r in rows)
            out["modes"][mode] = {"median": med, "runs": rows}
    sel, old = out["modes"]["selective"]["median"], out["modes"]["all"]["median"]
    out["wall_ratio"] = sel["time_to_95_s"] / old["time_to_95_s"] if old["time_to_95_s"] else None
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grids", default=",".join(GRIDS))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budget", type=int, default=80, help="trials per study")
    ap.add_argument("--max-metric-drop", type=float, default=0.01)
    ap.add_argument("--tiny", action="store_true", help="one grid, 1 seed, 8 trials")
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "two_stage.json"))
    args = ap.parse_args()
    names = ["digits_mlp"] if args.tiny else args.grids.split(",")
    seeds, budget = (1, 8) if args.tiny else (args.seeds, args.budget)
    started = time.perf_counter()
    grids = {name: one_grid(name, seeds, budget, args.max_metric_drop) for name in names}
    ratios = [g["wall_ratio"] for g in grids.values() if g["wall_ratio"] is not None]
    doc = {"what": "time to 95% of the grid's hypervolume, selective (two-stage) vs all (full trials), replayed "
                   "on recorded per-part wall times; medians over seeds",
           "command": " ".join(["python", *sys.argv]), "date": dt.date.today().isoformat(), "commit": commit(),
           "seeds": seeds, "budget": budget, "target": TARGET, "grids": grids,
           "wall_ratio_vs_previous_default": max(ratios) if ratios else None,
           "hv_fraction_at_10pct_wall": min(g["modes"]["selective"]["median"]["hv_at_10pct_sweep"]
                                           for g in grids.values()),
           "wall_s": time.perf_counter() - started}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "grids"}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
