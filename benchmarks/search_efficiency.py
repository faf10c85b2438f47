"""How fast does each search strategy find the real trade-offs? Replays whole studies on a
recorded grid (benchmarks/record_grid.py) through the real Tuner, with the trials
answered by benchmarks/replay.py, and scores the configurations found by hypervolume
relative to the full grid's front.

    python benchmarks/search_efficiency.py                    # 5 strategies x 10 seeds
    python benchmarks/search_efficiency.py --tiny             # a few seconds: proves it runs

Method: objectives are each configuration's median over its recorded repeats
(throughput up, peak memory down, accuracy up); feasible = accuracy at most
--max-metric-drop below the baseline cell's. Each objective is scaled to [0, 1] over
the grid's feasible cells, and hypervolume is taken against the reference point
(1.1, 1.1, 1.1) in that loss space. The x-axis counts every proposal, duplicates and
skipped ones included: they cost the user a turn of the loop too. For scale, the curve
of a searcher that knows the whole grid (best-first: each proposal the cell adding the
most hypervolume) is saved too.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from advisor.core.objectives import REF, UnitLoss, hypervolume  # noqa: E402, F401 - REF: for tests

from common import commit  # noqa: E402

STRATEGIES = ("default", "tpe", "nsga2", "random", "gp")


class Scorer:
    """Turns configurations of the grid into normalised loss points (feasible ones only)."""

    def __init__(self, grid, max_drop: float) -> None:
        from advisor.core.config import TrialConfig

        self.grid = grid
        base_key = TrialConfig.from_dict(grid.doc["baseline"]).key()
        base = grid.median(base_key)
        assert base is not None, "the baseline cell never succeeded"
        self.feasible = {k: m for k in grid.runs if (m := grid.median(k)) is not None and m[2] >= base[2] - max_drop}
        self._unit = UnitLoss(list(self.feasible.values()))  # scaled over the grid's feasible cells
        self.grid_hv = hypervolume([self.loss(k) for k in self.feasible])

    def loss(self, key: str) -> tuple[float, float, float]:
        return self._unit(self.feasible[key])

    def curve(self, keys_in_order: list[str | None], budget: int) -> list[float]:
        """HV fraction after each proposal (None: a proposal that measured nothing new)."""
        found: set[str] = set()
        out = []
        for key in keys_in_order[:budget]:
            if key is not None and key in self.feasible:
                found.add(key)
            out.append(hypervolume([self.loss(k) for k in found]) / self.grid_hv)
        return out + [out[-1] if out else 0.0] * (budget - len(out))


    def oracle(self, budget: int) -> list[float]:
        """The curve of a searcher that knows the grid: each proposal, the feasible cell
        that adds the most hypervolume (best-first; a ceiling for every strategy)."""
        found: list[str] = []
        out = []
        for _ in range(min(budget, len(self.feasible))):
            best = max((k for k in self.feasible if k not in found),
                       key=lambda k: hypervolume([self.loss(c) for c in [*found, k]]))
            found.append(best)
            out.append(hypervolume([self.loss(c) for c in found]) / self.grid_hv)
        return out + [out[-1] if out else 0.0] * (budget - len(out))


def replay_study(strategy: str, seed: int, grid, grid_path: str, model: str, budget: int, max_drop: float,
                 workdir: Path) -> list[str | None]:
    """Run one study on the replayed grid; the configuration key of each proposal in order."""
    import optuna

    from advisor.core.stored import read_trial
    from advisor.study.options.tune_options import TuneOptions
    from advisor.study.run.plan import plan_study
    from advisor.study.run.tuner import Tuner

    from replay import ReplayExecutor

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    settings = grid.doc["settings"]
    options = TuneOptions(workload_path=model, space=grid_path, trials=budget, sampler=strategy, seed=seed,
                          storage=f"sqlite:///{workdir / f'{strategy}-{seed}.db'}", max_metric_drop=max_drop,
                          train_samples=settings["train_samples"], study_name=f"{strategy}-{seed}",
                          confirm=False, metric_seeds=1)
    study = Tuner(plan_study(options), executor=ReplayExecutor(grid, seed=seed)).run().study
    records = [read_trial(t) for t in sorted(study.trials, key=lambda t: t.number)]
    return [r.config.key() if r.state == "complete" and r.config else None for r in records]


def first_reaching(curve: list[float], target: float) -> int | None:
    return next((i + 1 for i, v in enumerate(curve) if v >= target - 1e-12), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", default=str(HERE / "data" / "grid_digits_cnn_cpu.json"))
    ap.add_argument("--model", default=str(HERE.parent / "examples" / "digits_cnn.py"))
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budget", type=int, default=40, help="proposals per study")
    ap.add_argument("--max-metric-drop", type=float, default=0.01)
    ap.add_argument("--tiny", action="store_true", help="default and random, 1 seed, 5 proposals")
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "search_efficiency.json"))
    args = ap.parse_args()
    from replay import Grid

    strategies = ["default", "random"] if args.tiny else args.strategies.split(",")
    seeds, budget = (1, 5) if args.tiny else (args.seeds, args.budget)
    grid = Grid.load(args.grid)
    grid_path = str(HERE / "data" / Path(grid.doc["space"]).name)
    scorer = Scorer(grid, args.max_metric_drop)
    started = time.perf_counter()
    curves: dict[str, list[list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="adv-search-") as tmp:
        for strategy in strategies:
            for seed in range(seeds):
                keys = replay_study(strategy, seed, grid, grid_path, args.model, budget, args.max_metric_drop,
                                    Path(tmp))
                curves.setdefault(strategy, []).append(scorer.curve(keys, budget))
                print(f"{strategy:8s} seed {seed}: HV fraction {curves[strategy][-1][-1]:.3f} after {budget}",
                      flush=True)
    medians = {s: [statistics.median(c[i] for c in cs) for i in range(budget)] for s, cs in curves.items()}
    at = max(1, math.ceil(0.10 * len(grid.runs)))
    summary = {s: {"hv_fraction_at_10pct_grid": m[min(at, budget) - 1], "final": m[-1]} for s, m in medians.items()}
    oracle = scorer.oracle(budget)
    summary["oracle"] = {"hv_fraction_at_10pct_grid": oracle[min(at, budget) - 1], "final": oracle[-1],
                         "proposals_to_0.95": first_reaching(oracle, 0.95)}
    if "random" in medians and "default" in medians:
        target = medians["random"][-1]
        ours, theirs = first_reaching(medians["default"], target), first_reaching(medians["random"], target)
        summary["trials_to_random_final"] = {"default": ours, "random": theirs,
                                            "ratio": ours / theirs if ours and theirs else None}
    doc = {"what": "hypervolume fraction of the grid's front vs proposals, median over seeds",
           "command": " ".join(["python", *sys.argv]), "grid": args.grid, "grid_cells": len(grid.runs),
           "feasible_cells": len(scorer.feasible), "budget": budget, "seeds": seeds,
           "ten_percent_of_grid": at, "date": dt.date.today().isoformat(), "commit": commit(),
           "wall_s": time.perf_counter() - started, "summary": summary, "median_curves": medians, "oracle_curve": oracle, "curves": curves}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    _plot(medians, oracle, at, out.with_suffix(".png"))
    print(json.dumps(summary, indent=1))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


def _plot(medians: dict[str, list[float]], oracle: list[float], at: int, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, curve in medians.items():
        ax.plot(range(1, len(curve) + 1), curve, label=name, linewidth=2 if name == "default" else 1)
    ax.plot(range(1, len(oracle) + 1), oracle, color="black", linestyle="--", linewidth=1,
            label="best-first, grid known")
    ax.axvline(at, color="grey", linestyle=":", label="10% of the grid")
    ax.axhline(0.95, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel("proposals (duplicates and skipped included)")
    ax.set_ylabel("hypervolume / grid's")
    ax.set_ylim(0, 1.02)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)



if __name__ == "__main__":
    sys.exit(main())
