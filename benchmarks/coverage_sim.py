"""Does paired confirmation's 95% interval cover the true ratio, early stopping and
sittings included? A simulation with a known truth and no machine: each replicate runs
rounds of the baseline and a candidate on a simulated machine whose speed wanders (a
random walk, and a step between sittings), builds pairs with the real interpolation
(``advisor.core.pairs.interpolate``), stops them with the real rule
(``Confirmation.settle``) and checks the shown interval (``Confirmation.throughput``)
against the true ratio. The rule before Stein's (at least 3 pairs, stop once the plain t
interval is within the target; each sitting stopped so, every pair then pooled as one
sample whatever its sitting) runs on the same seeds for comparison.

    python benchmarks/coverage_sim.py                  # 2000 replicates a scenario, ~10 s
    python benchmarks/coverage_sim.py --replicates 500

Writes benchmarks/results/coverage_sim.json; ``tests/core/test_pairs_coverage.py`` runs
the same scenarios, smaller, as a test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from advisor.core.intervals import interval  # noqa: E402
from advisor.core.pairs import Confirmation, Pair, interpolate  # noqa: E402

TRUE_RATIO = 1.3
MEMORY_RATIO = 0.9


@dataclass(frozen=True)
class Scenario:
    """pair_sd: the sd of one pair's log throughput ratio (run noise and the machine's
    wander within a round together); walk_sd: the machine's speed wander per run (log);
    sittings: sittings in a row, each allowed ``max_pairs`` more pairs (as ``advisor
    confirm --pairs`` raised by that much); between_sd: the sd of the true log ratio from
    one sitting to the next (around the long-run ratio, the truth checked)."""

    pair_sd: float
    target: float = 0.03
    max_pairs: int = 30
    sittings: int = 1
    between_sd: float = 0.0
    walk_sd: float = 0.01


SCENARIOS = {
    "one sitting, per-pair sd 5%, cap 30": Scenario(0.05),
    "one sitting, per-pair sd 2%, cap 30": Scenario(0.02),
    "one sitting, per-pair sd 5%, cap 8 (the default)": Scenario(0.05, max_pairs=8),
    "two sittings, per-pair sd 3%, no drift between them": Scenario(0.03, sittings=2),
    "two sittings, per-pair sd 3%, 3% drift between them": Scenario(0.03, sittings=2, between_sd=0.03),
    "three sittings, per-pair sd 3%, 5% drift between them": Scenario(0.03, sittings=3, between_sd=0.05),
}


def old_settle(c: Confirmation, target: float, max_pairs: int, sitting: int) -> None:
    """The rule before Stein's, applied to each sitting: at least 3 pairs of the sitting,
    stop once their plain t intervals are within the target (or at the cap)."""
    mine = [p for p in c.pairs if p.sitting == sitting]
    thr = interval([p.throughput_ratio for p in mine])
    mem = interval([p.memory_ratio for p in mine])
    if len(mine) >= 3 and thr is not None and mem is not None and max(thr.halfwidth, mem.halfwidth) <= target:
        c.status = "confirmed"
    else:
        c.status = "capped" if len(c.pairs) >= max_pairs else "running"


class Machine:
    """The simulated machine: its speed wanders by ``walk_sd`` (log) a run, and each run adds
    noise sized so that one pair's log ratio has the standard deviation ``pair_sd`` (a
    pair's variance is 1.5 runs' plus half the walk's)."""

    def __init__(self, rng: random.Random, pair_sd: float, walk_sd: float) -> None:
        self.rng, self.walk_sd, self.speed = rng, walk_sd, 0.0
        self.run_sd = math.sqrt(max(0.0, pair_sd ** 2 - walk_sd ** 2 / 2) / 1.5)

    def runs(self, ratios: Sequence[float]) -> list[float]:
        """One run's throughput for each true ratio, in order (a round: A C ... A)."""
        out = []
        for ratio in ratios:
            self.speed += self.rng.gauss(0.0, self.walk_sd)
            out.append(1000.0 * math.exp(self.speed + self.rng.gauss(0.0, self.run_sd)) * ratio)
        return out


def replicate(s: Scenario, rng: random.Random, rule: str) -> tuple[bool, int, bool, float]:
    """One confirmation on the simulated machine: (covered, pairs, stopped before the cap,
    relative half-width)."""
    machine, c, early = Machine(rng, s.pair_sd, s.walk_sd), Confirmation(0), False
    for sitting in range(s.sittings):
        log_ratio = math.log(TRUE_RATIO) + rng.gauss(0.0, s.between_sd)  # this sitting's ratio
        machine.speed += rng.gauss(0.0, 0.2)  # hours later: another speed altogether
        cap = (sitting + 1) * s.max_pairs
        c.status = "running"
        c.settle(s.target, cap, sitting) if rule == "stein" else old_settle(c, s.target, cap, sitting)
        while not c.done:
            runs = machine.runs((1.0, math.exp(log_ratio), 1.0))  # A C A, a fresh baseline run each round
            memory = 100.0 * MEMORY_RATIO * math.exp(rng.gauss(0.0, 0.005))
            c.pairs.append(Pair(0.5, interpolate(runs[0], runs[2], 0.5), runs[1], 100.0, memory, sitting=sitting))
            c.settle(s.target, cap, sitting) if rule == "stein" else old_settle(c, s.target, cap, sitting)
        early = c.status in ("confirmed", "wide") and len(c.pairs) < cap  # the last sitting, before its cap
    shown = c.throughput if rule == "stein" else interval([p.throughput_ratio for p in c.pairs])
    assert shown is not None
    return shown.low <= TRUE_RATIO <= shown.high, len(c.pairs), early, shown.halfwidth


def simulate(s: Scenario, replicates: int, seed: int, rule: str = "stein") -> dict:
    """Coverage of the shown 95% interval over ``replicates`` confirmations."""
    rng = random.Random(seed)
    runs = [replicate(s, rng, rule) for _ in range(replicates)]
    return {"coverage": sum(r[0] for r in runs) / replicates, "mean_pairs": statistics.fmean(r[1] for r in runs),
            "stopped_early": sum(r[2] for r in runs) / replicates,
            "median_halfwidth": statistics.median(r[3] for r in runs)}


# Candidates confirmed together, as a study's front is: rounds A C1 C2 ... A (the order
# reversed every other round), each candidate's pair against the baseline interpolated at
# its moment; Stein's rule, and the early stop once a candidate's place is decided
# (``advisor.core.pairs.settled``). Each scenario: per-pair sd, the true throughput and
# memory ratios of the candidates, the pair cap.
PICK_SCENARIOS = {
    "two candidates 1.30 / 1.15, per-pair sd 5%, cap 8": (0.05, (1.30, 1.15), (0.90, 0.75), 8),
    "two candidates 1.30 / 1.25, per-pair sd 5%, cap 8": (0.05, (1.30, 1.25), (0.90, 0.75), 8),
    "two candidates 1.30 / 1.15, per-pair sd 3%, cap 30": (0.03, (1.30, 1.15), (0.90, 0.75), 30),
    "a front of five (1.55 / 1.50 / 1.40 / 1.10 / 0.55), per-pair sd 5%, cap 8":
        (0.05, (1.55, 1.50, 1.40, 1.10, 0.55), (6.2, 0.75, 0.74, 0.67, 0.61), 8),
    # README command 1's front on 2026-11-27: three near-equal fastest, each paired to the cap
    "three near-equal fastest (1.71 / 1.68 / 1.67 / 1.40 / 1.29 / 0.54), per-pair sd 5%, cap 8":
        (0.05, (1.71, 1.68, 1.67, 1.40, 1.29, 0.54), (6.9, 0.94, 0.945, 0.83, 0.81, 0.69), 8),
}


def replicate_pick(pair_sd: float, truths: tuple[float, ...], memories: tuple[float, ...], cap: int,
                   rng: random.Random, settle_early: bool) -> tuple[list[tuple[bool, int]], float]:
    """Each candidate's (covered, pairs) after one confirmation on the simulated machine,
    and the fastest pick's shortfall: the truly fastest's true ratio over the picked one's
    (the highest shown centre), minus 1."""
    from advisor.core.pairs import settled

    machine, cs = Machine(rng, pair_sd, walk_sd=0.02), [Confirmation(i) for i in range(len(truths))]
    for round_number in range(cap):
        active = [i for i, c in enumerate(cs) if not c.done]
        if not active:
            break
        order = active if round_number % 2 == 0 else active[::-1]
        runs = machine.runs((1.0, *(truths[i] for i in order), 1.0))
        for k, i in enumerate(order, start=1):
            w = k / (len(order) + 1)
            memory = 100.0 * memories[i] * math.exp(rng.gauss(0.0, 0.01))
            cs[i].pairs.append(Pair(w, interpolate(runs[0], runs[-1], w), runs[k], 100.0, memory))
            cs[i].settle(0.03, cap)
        for i in order:
            if settle_early and not cs[i].done and settled(cs[i], cs, max_pairs=cap):
                cs[i].status = "settled"
    out = []
    for i, c in enumerate(cs):
        shown = c.throughput
        assert shown is not None
        out.append((shown.low <= truths[i] <= shown.high, len(c.pairs)))
    picked = max(range(len(cs)), key=lambda i: cs[i].throughput.center)  # type: ignore[union-attr]
    return out, max(truths) / truths[picked] - 1.0


def simulate_pick(scenario: tuple, replicates: int, seed: int, settle_early: bool = True) -> dict:
    """The lowest coverage of a candidate's shown interval, and the mean pairs a candidate
    ran, with the early stop for a settled pick (``settle_early``) or without it, on the
    same seeds."""
    pair_sd, truths, memories, cap = scenario
    rng = random.Random(seed)
    done = [replicate_pick(pair_sd, truths, memories, cap, rng, settle_early) for _ in range(replicates)]
    runs = [r for r, _ in done]
    return {"coverage": min(sum(r[i][0] for r in runs) / replicates for i in range(len(truths))),
            "mean_pairs": statistics.fmean(p for r in runs for _, p in r),
            "fastest_pick_shortfall": statistics.fmean(short for _, short in done)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", default=str(HERE / "results" / "coverage_sim.json"))
    args = parser.parse_args(argv)
    from common import commit

    scenarios = {}
    for i, (name, s) in enumerate(SCENARIOS.items()):
        scenarios[name] = row = {"scenario": asdict(s), "stein": simulate(s, args.replicates, args.seed + i),
                                 "old_rule": simulate(s, args.replicates, args.seed + i, rule="old")}
        print(f"{name}: " + "; ".join(f"{rule} covers {r['coverage']:.3f}, {r['mean_pairs']:.1f} pairs, "
                                      f"{100 * r['stopped_early']:.0f}% early, +-{100 * r['median_halfwidth']:.1f}%"
                                      for rule, r in row.items() if rule != "scenario"))
    picks = {}
    for i, (name, scenario) in enumerate(PICK_SCENARIOS.items()):
        picks[name] = row = {"settled_early": simulate_pick(scenario, args.replicates, args.seed + 100 + i),
                             "to_the_rule_alone": simulate_pick(scenario, args.replicates, args.seed + 100 + i,
                                                                settle_early=False)}
        print(f"{name}: " + "; ".join(f"{how} covers {r['coverage']:.3f}, {r['mean_pairs']:.1f} pairs, the fastest "
                                      f"pick {100 * r['fastest_pick_shortfall']:.2f}% short"
                                      for how, r in row.items()))
    result = {"date": datetime.date.today().isoformat(), "commit": commit(),
              "command": "python benchmarks/coverage_sim.py" + (f" --replicates {args.replicates}"
                                                               if args.replicates != 2000 else ""),
              "replicates": args.replicates, "seed": args.seed, "true_ratio": TRUE_RATIO,
              "coverage_simulated": min(r["stein"]["coverage"] for r in scenarios.values()),
              "old_rule_coverage": min(r["old_rule"]["coverage"] for r in scenarios.values()),
              "scenarios": scenarios,
              "coverage_with_settled_picks": min(r["settled_early"]["coverage"] for r in picks.values()),
              "pick_scenarios": picks}
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    print(f"lowest coverage: {result['coverage_simulated']:.3f} (the old rule: {result['old_rule_coverage']:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
