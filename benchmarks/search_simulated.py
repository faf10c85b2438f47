"""The default strategy on a simulated machine whose effects are known: how much of the
true front's hypervolume each sampler holds after each proposal. No timing noise of this
machine (the figures are computed, with a seeded noise of their own), the real Strategy and
Ledger on a real Optuna study (in memory). tests/search/test_effects.py runs the same
simulation with its assertions.

    python benchmarks/search_simulated.py                  # default, tpe, random; 5 seeds; 20 proposals
    python benchmarks/search_simulated.py --seeds 2 --budget 12

The simulated machine (``truth``): throughput and memory multiply; bf16 and channels_last
interact (1.3x more together); the largest batch loses the metric unless gradient
accumulation keeps its micro-batches small; pruning always loses it. Made up, named as such.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import math
import random
import statistics
import sys
from pathlib import Path

import optuna

from advisor.core.config import TrialConfig
from advisor.core.objectives import Figures, Limits, hypervolume
from advisor.core.results import TrialResult
from advisor.search.space import parse_space
from advisor.search.strategy import Strategy
from advisor.study.run._ledger import Ledger

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import commit  # noqa: E402

KNOBS = ("batch_size", "precision", "channels_last", "grad_accumulation", "activation_checkpointing", "pruning")
SPACE = parse_space({"batch_size": {"choices": [32, 64, 128, 256]}, "precision": {"choices": ["fp32", "bf16"]},
                     "channels_last": {"choices": [False, True]}, "grad_accumulation": {"choices": [1, 2]},
                     "activation_checkpointing": {"choices": [False, True]},
                     "pruning": {"choices": ["none", "l1_unstructured"]}}, "simulated", "simulated")
BASE = TrialConfig(batch_size=64)


def truth(c: TrialConfig) -> Figures:
    """The simulated machine: throughput and memory multiply, bf16 and channels_last
    interact (1.3x more together), the largest batch loses the metric unless gradient
    accumulation keeps its micro-batches small, pruning loses it always."""
    speed, memory, score = 1000.0, 100.0, 0.90
    r = c.batch_size / 64
    speed, memory = speed * r ** 0.3, memory * r ** 0.8
    if c.batch_size == 256 and c.grad_accumulation == 1:
        score -= 0.05
    if c.precision == "bf16":
        speed, memory, score = speed * 1.6, memory * 0.7, score - 0.002
    if c.channels_last:
        speed *= 1.2 * (1.3 if c.precision == "bf16" else 1.0)
    if c.grad_accumulation == 2:
        speed, memory = speed * 0.9, memory * 0.6
    if c.activation_checkpointing:
        speed, memory = speed * 0.75, memory * 0.5
    if c.pruning != "none":
        speed, score = speed * 0.95, score - 0.03
    return Figures(speed, memory, score)


@functools.cache
def scorer():
    """The true feasible front's hypervolume, in log-ratio loss space as the model's."""
    cells = {c.key(): truth(c) for c in SPACE.configs() if truth(c).score >= 0.90 - 0.01}
    logs = [(math.log(f[0]), math.log(f[1]), f[2]) for f in cells.values()]
    lo, hi = [min(v[i] for v in logs) for i in range(3)], [max(v[i] for v in logs) for i in range(3)]
    span = [(h - low) or 1.0 for low, h in zip(lo, hi)]

    def loss(f):
        return ((hi[0] - math.log(f[0])) / span[0], (math.log(f[1]) - lo[1]) / span[1], (hi[2] - f[2]) / span[2])

    full = hypervolume([loss(f) for f in cells.values()])
    return lambda keys: hypervolume([loss(cells[k]) for k in keys if k in cells]) / full


def simulated_study(sampler: str, seed: int, budget: int = 20, noise: float = 0.03):
    """A whole study of ``budget`` proposals on the simulated machine; the trials in order."""
    rng = random.Random(seed)
    study = optuna.create_study(study_name="sim",  # in memory: nothing here is about storage
                                directions=["maximize", "minimize", "maximize"],
                                sampler=optuna.samplers.RandomSampler(seed=seed) if sampler == "random"
                                else optuna.samplers.TPESampler(seed=seed))
    strategy = Strategy(SPACE, BASE, workload="train", sampler=sampler, budget=budget, limits=Limits(0.01))
    ledger = Ledger(study, strategy, Limits(0.01))

    def run(c: TrialConfig) -> TrialResult:
        f = truth(c)
        return TrialResult(ok=True, throughput=f.throughput * math.exp(rng.gauss(0, noise)),
                           peak_memory_bytes=int(f.peak_memory_bytes * 1e6 * math.exp(rng.gauss(0, noise / 3))),
                           score=f.score, step_time_median_s=0.01)

    proposal = ledger.propose_baseline()
    ledger.tell(proposal.number, run(proposal.config), 1.0)
    for _ in range(budget - 1):
        proposal = ledger.propose()
        if proposal is None:
            break
        ledger.tell(proposal.number, run(proposal.config), 1.0)
    return sorted(study.trials, key=lambda t: t.number)




def reached(trials) -> list[float]:
    """The fraction of the true front's hypervolume after each proposal."""
    fraction, keys, out = scorer(), [], []
    for t in trials:
        if t.user_attrs.get("config"):
            keys.append(TrialConfig.from_dict(t.user_attrs["config"]).key())
        out.append(fraction(keys))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samplers", default="default,tpe,random")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--budget", type=int, default=20)
    ap.add_argument("-o", "--output", default=str(HERE / "results" / "search_simulated.json"))
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    curves = {s: [reached(simulated_study(s, seed, args.budget)) for seed in range(args.seeds)]
              for s in args.samplers.split(",")}
    medians = {s: [statistics.median(c[i] for c in cs if i < len(c)) for i in range(args.budget)]
               for s, cs in curves.items()}
    summary = {s: {"at_10": m[min(10, args.budget) - 1], "final": m[-1]} for s, m in medians.items()}
    doc = {"what": "fraction of the simulated machine's true front hypervolume after each proposal, median over seeds",
           "command": " ".join(["python", *sys.argv]), "budget": args.budget, "seeds": args.seeds,
           "date": dt.date.today().isoformat(), "commit": commit(), "summary": summary, "median_curves": medians}
    out = Path(args.output)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
