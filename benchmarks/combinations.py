"""Robustness check: run random configurations of search spaces for real (short trials,
through ``advisor.trial.entry.run_trial`` as a study's trial process does) on several model
families, and list every failure: a combination the search may propose must work, or be
refused by a conflict rule with its reason (``advisor.techniques.rules.refusal``), never
burn a trial on a bug.

    python benchmarks/combinations.py                       # every family, default + cpu spaces
    python benchmarks/combinations.py cnn attention --spaces cpu -n 60
    python benchmarks/combinations.py examples/digits_inference.py --workload inference -n 60
    python benchmarks/combinations.py --recheck benchmarks/results/combinations.json

Configurations are drawn knob by knob as the search does (conditional knobs only when
active); those ``refusal`` rules out are skipped, as the study skips them. Results go to
``--json`` after every trial (an interrupted run keeps what it measured). ``--recheck``
runs again each failed configuration of a results file and records what it does now (runs,
refused with the rule's reason, or still fails): how each failure was resolved.
Not a timing benchmark: trials are short and share this process (compile caches,
threads), so only pass/fail means anything.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

from advisor.core.config import TrialConfig
from advisor.core.results import TrialPayload, TrialSettings
from advisor.core.units import first_line
from advisor.machine.hardware import detect
from advisor.search.space import SearchSpace, filter_space, load_space
from advisor.techniques.rules import refusal
from advisor.trial.entry import run_trial
from advisor.workload.contract import load_workload
from advisor.workload.preflight import preflight

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = {  # the model families the check covers by default
    "cnn": "examples/digits_cnn.py",
    "mlp": "examples/digits_mlp.py",
    "attention": "tests/workloads/encoder.py",  # nn.TransformerEncoder over the 8 rows of a digit
    "decoder": "examples/char_lm.py",  # decoder-only LM, scaled_dot_product_attention
    "transformers": "examples/hf_gpt2.py",  # transformers' GPT2LMHeadModel from a config
}
EXCEPTION = re.compile(r"^[\w.]*(Error|Exception|Failure)\b.*: ")
SETTINGS: dict[str, Any] = {"train_samples": 320, "max_timing_s": 0.3, "min_steps": 3, "warmup_steps": 1}


class _RandomTrial:
    """Stands in for the Optuna trial ``SearchSpace.sample`` asks: each suggestion a random choice."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        return self.rng.choice(choices)


def draw(space: SearchSpace, rng: random.Random) -> TrialConfig:
    """One random point, drawn knob by knob as the search does (``SearchSpace.sample``)."""
    return space.sample(_RandomTrial(rng))  # type: ignore[arg-type]


def proposals(space: SearchSpace, workload: str, n: int, seed: int) -> list[TrialConfig]:
    """Up to ``n`` distinct random configurations that no rule refuses."""
    rng, seen, out = random.Random(seed), set(), []
    for _ in range(200 * n):
        cfg = draw(space, rng)
        key = cfg.key()
        if key in seen or refusal(cfg, workload):
            continue
        seen.add(key)
        out.append(cfg)
        if len(out) == n:
            break
    return out


def run_one(workload: Any, cfg: TrialConfig, kind: str) -> dict[str, Any]:
    """One trial: its changed knobs, outcome and (for a failure) the first line of the error."""
    reason = refusal(cfg, kind)
    if reason:
        return {"config": cfg.changed(), "outcome": "refused", "reason": reason}
    started = time.perf_counter()
    result = run_trial(TrialPayload.of(workload, cfg, TrialSettings(workload=kind, **SETTINGS)))
    row: dict[str, Any] = {"config": cfg.changed(), "outcome": "ok" if result.ok else result.failure_class,
                           "seconds": round(time.perf_counter() - started, 1)}
    if not result.ok:
        row["message"] = error_line(result.failure_message or "")
    return row


def error_line(message: str) -> str:
    """The line naming the exception (``SomeError: ...``, the last one of a traceback), else
    the message's first line: torch's longer errors end with tips, not with the error."""
    named = [line for line in message.splitlines() if EXCEPTION.match(line)]
    return first_line(named[-1] if named else message, 300)


def family_path(name: str) -> str:
    return FAMILIES.get(name, name)


def check(args: argparse.Namespace, report: dict[str, Any], save: Any) -> None:
    hw = detect()
    for family in args.models:
        workload = load_workload(str(ROOT / family_path(family)))
        facts = {"workload": args.workload} | preflight(workload)
        for space_name in args.spaces:
            space = filter_space(load_space(space_name), hw, facts)
            entry = {"family": family, "model": family_path(family), "space": space_name, "tried": 0, "failed": 0,
                     "trials": []}
            report["runs"].append(entry)
            deadline = time.monotonic() + args.budget_s
            for cfg in proposals(space, args.workload, args.n, args.seed):
                if time.monotonic() > deadline:
                    entry["stopped"] = f"time budget of {args.budget_s:.0f} s spent"
                    break
                row = run_one(workload, cfg, args.workload)
                entry["trials"].append(row)
                entry["tried"] += 1
                entry["failed"] += row["outcome"] not in ("ok", "refused")
                if row["outcome"] != "ok":
                    print(f"{family}/{space_name} {row['outcome'].upper()} {row['config']}: "
                          f"{row.get('message') or row.get('reason')}", flush=True)
                save()
            print(f"{family}/{space_name}: {entry['tried']} configurations, {entry['failed']} failed", flush=True)


def recheck(args: argparse.Namespace, report: dict[str, Any], save: Any) -> None:
    """Run each failure of the results file again; record its outcome now (``dropped``: the
    space no longer offers one of its values for this model, with the reason)."""
    hw, default = detect(), TrialConfig()  # a knob dropped whole is at its default: not what a row changed
    for entry in report["runs"]:
        workload, space = None, None
        for row in entry["trials"]:
            if row["outcome"] in ("ok", "refused") or "now" in row:
                continue
            if workload is None:
                workload = load_workload(str(ROOT / entry["model"]))
                facts = {"workload": args.workload} | preflight(workload)
                space = filter_space(load_space(entry["space"]), hw, facts)
            cfg = TrialConfig.from_dict(row["config"])
            gone = [d for d in space.dropped if getattr(cfg, d.knob, None) == d.value != getattr(default, d.knob, None)]
            now = ({"config": cfg.changed(), "outcome": "dropped", "reason": f"{gone[0].knob}={gone[0].value!r}: "
                    f"{gone[0].reason}"} if gone else run_one(workload, cfg, args.workload))
            row["now"] = {k: v for k, v in now.items() if k != "config"}
            print(f"{entry['family']}/{entry['space']} {row['config']}: now {now['outcome']} "
                  f"{now.get('reason') or now.get('message') or ''}", flush=True)
            save()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=list(FAMILIES),
                    help=f"family names ({', '.join(FAMILIES)}) or workload files; default: every family")
    ap.add_argument("--workload", default="train", choices=("train", "inference"))
    ap.add_argument("--spaces", nargs="+", help="default: default and cpu (train) or inference")
    ap.add_argument("-n", type=int, default=40, help="configurations per family and space")
    ap.add_argument("--budget-s", type=float, default=900.0, help="time limit per family and space")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/combinations.json"))
    ap.add_argument("--recheck", help="a results file: run its failures again and record the outcome")
    args = ap.parse_args()
    args.spaces = args.spaces or (["inference"] if args.workload == "inference" else ["default", "cpu"])
    out = Path(args.recheck or args.json)
    report = (json.loads(out.read_text()) if args.recheck else
              {"command": " ".join(sys.argv), "settings": SETTINGS, "seed": args.seed, "cpu_cores": os.cpu_count(),
               "runs": []})

    def save() -> None:
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1) + "\n")
        tmp.replace(out)

    (recheck if args.recheck else check)(args, report, save)
    failed = [r for e in report["runs"] for r in e["trials"] if r["outcome"] not in ("ok", "refused")
              and r.get("now", {}).get("outcome", r["outcome"]) not in ("ok", "refused", "dropped")]
    print(f"{sum(e['tried'] for e in report['runs'])} configurations; {len(failed)} failing now; written to {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
