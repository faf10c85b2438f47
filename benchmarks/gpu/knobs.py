"""Each GPU knob against its model's fp32 baseline, in interleaved pairs with 95% intervals.

    python benchmarks/gpu/knobs.py train --out DIR --budget-s 240
    python benchmarks/gpu/knobs.py compile --out DIR --budget-s 240
    python benchmarks/gpu/knobs.py inference --out DIR --budget-s 150

Every run is a real trial (``part="probe"``: timed steps and peak memory, no training to
the metric) through the Ray executor and the fork server, one at a time on the whole GPU,
as ``advisor tune``'s probes are. A round runs, for each model of the table, its baseline,
then its variants in a shuffled order, then its baseline again; each variant's ratio is to
the baseline interpolated (geometrically) at its place between the two baseline runs, so a
drift of the GPU's clocks within the round falls on both. Rounds repeat until ``--pairs``
or until ``--budget-s`` is spent (the first round always completes), so a GPU session that
is short of time still brings back one pair of each knob. The interval is Student's t on
the pairs' log ratios (``advisor.core.pairs.interval``): none with one pair.

A variant this machine cannot run is not run: it is listed with the reason (the same
checks as ``advisor tune``'s space). Each finished run is appended at once to
``knobs_TABLE.jsonl`` under ``--out``, so a run cut short keeps what it measured; the table
with its intervals goes to ``knobs_TABLE.json``.

The models (benchmarks/gpu/models/) are GPU-sized; ``ADVISOR_GPU_CHECK_TINY=1`` shrinks
them for a dry run of this script on a CPU (the figures then mean nothing).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from knob_tables import TABLES, Group

from advisor.core.config import TrialConfig
from advisor.core.pairs import interval
from advisor.core.results import TrialPayload, TrialResult, TrialSettings
from advisor.machine.hardware import Hardware, detect, fingerprint
from advisor.runner.executor import run_one
from advisor.runner.ray_executor import RayExecutor
from advisor.techniques.registry import TECHNIQUES
from advisor.techniques.rules import refusal
from advisor.workload.contract import load_workload

MODELS = Path(__file__).resolve().parent / "models"


def cannot_run(config: TrialConfig, base: TrialConfig, workload: str, hw: Hardware) -> str | None:
    """Why this machine cannot run ``config`` (a knob it lacks, or a combination no machine
    runs), or None."""
    for key, value in config.to_dict().items():
        if value != getattr(base, key):
            reason = TECHNIQUES[key].unavailable(value, hw) if key in TECHNIQUES else None
            if reason:
                return f"{key}={value}: {reason}"
    return refusal(config, workload)


def label(base: TrialConfig, config: TrialConfig) -> str:
    diff = {k: v for k, v in config.to_dict().items() if v != getattr(base, k)}
    return "baseline" if not diff else " ".join(f"{k}={v}" for k, v in diff.items())


def at(before: float, after: float, position: float) -> float:
    """The baseline's figure at ``position`` (0..1) between two runs, interpolated
    geometrically."""
    return math.exp((1 - position) * math.log(before) + position * math.log(after))


class RunLog:
    """Each finished run, appended at once to ``knobs_TABLE.jsonl`` (what a run stopped at
    its limit keeps)."""

    def __init__(self, name: str, out: Path) -> None:
        self.path = out / f"knobs_{name}.jsonl"
        self.path.write_text("")

    def record(self, group: Group, round_no: int, kind: str, config: TrialConfig, base: TrialConfig,
               result: TrialResult) -> None:
        entry = {"round": round_no, "model": group.model, "workload": group.workload, "kind": kind,
                 "variant": label(base, config), "config": config.to_dict(), "result": result.to_dict()}
        with self.path.open("a") as fh:
            fh.write(json.dumps(entry) + "\n")


def run_table(name: str, out: Path, budget_s: float, max_pairs: int, seed: int, trial_timeout: float) -> dict:
    hw = detect()
    log = RunLog(name, out)
    started = time.monotonic()
    executor = RayExecutor(hw.device, state_dir=Path(tempfile.mkdtemp(prefix="advg-"))).start()
    rng = random.Random(seed)
    groups = []
    for group in TABLES[name]:
        workload = load_workload(str(MODELS / f"{group.model}.py"))
        base = TrialConfig.from_dict({**workload.baseline, **dict(group.baseline)})
        runnable, refused = [], []
        for change in group.variants:
            config = base.replace(**change)
            reason = cannot_run(config, base, group.workload, hw)
            (refused if reason else runnable).append((config, reason))
        settings = TrialSettings(train_samples=1, device=hw.device, workload=group.workload, part="probe")
        groups.append((group, workload, base, runnable, refused, settings))
        for config, reason in refused:
            print(f"refused  {group.model:11s} {label(base, config):60s} {reason}", flush=True)

    pairs: dict[tuple[str, str], list[dict]] = {}
    failures: dict[tuple[str, str], list[str]] = {}
    number = 0
    try:
        for round_no in range(1, max_pairs + 1):
            if round_no > 1 and time.monotonic() - started > budget_s:
                break
            for group, workload, base, runnable, _, settings in groups:
                def run(config: TrialConfig, kind: str) -> TrialResult:
                    nonlocal number
                    number += 1
                    payload = TrialPayload.of(workload, config, settings, estimate=(round_no == 1))
                    result = run_one(executor, number, payload, timeout=trial_timeout)
                    log.record(group, round_no, kind, config, base, result)
                    shown = (f"{result.throughput:,.1f} samples/s, {result.peak_memory_bytes / 2**20:,.0f} MiB"
                             if result.ok else f"FAILED {result.failure_class}: {(result.failure_message or '')[:160]}")
                    print(f"round {round_no} {group.model:11s} {label(base, config):60s} {shown}", flush=True)
                    return result

                runs: list[tuple[str, TrialResult]] = []  # this round's, in the order they ran
                try:
                    runs.append(("baseline", run(base, "baseline")))
                    order = list(runnable)
                    rng.shuffle(order)
                    for config, _ in order:
                        runs.append((label(base, config), run(config, "variant")))
                    runs.append(("baseline", run(base, "baseline")))
                finally:  # a round stopped at the limit still pairs what it ran
                    pair_round(group.model, runs, pairs, failures)
    except KeyboardInterrupt:  # stopped at its limit: the table of what was measured
        print("interrupted: the table holds the rounds that finished", flush=True)
    finally:
        executor.shutdown()

    rows = []
    for group, _, base, runnable, refused, _ in groups:
        for config, reason in [(base, None)] + [(c, None) for c, _ in runnable] + refused:
            rows.append(_row(group.model, group.workload, label(base, config), config.to_dict(), reason, pairs,
                             failures))
    return {"table": name,
            "what": "each knob vs its model's fp32 baseline: paired probes, 95% t intervals on log ratios",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "commit": os.environ.get("ADVISOR_CHECK_COMMIT", ""), "hardware": fingerprint(hw),
            "torch": _versions(), "budget_s": budget_s, "wall_s": time.monotonic() - started,
            "tiny_models": os.environ.get("ADVISOR_GPU_CHECK_TINY") == "1", "rows": rows}


def pair_round(model: str, runs: list[tuple[str, TrialResult]], pairs: dict, failures: dict) -> None:
    """One round's runs, in the order they ran (an opening baseline, the variants, a closing
    baseline), as pairs: each variant's ratios to the baseline interpolated at its place
    between the two baselines. A round stopped before its closing baseline pairs its
    variants with the opening one alone (``closing_baseline`` false: clock drift within the
    round then falls on the variant)."""
    if not runs:
        return
    first = runs[0][1]
    closed = len(runs) > 1 and runs[-1][0] == "baseline"
    last = runs[-1][1] if closed else first
    variants = runs[1:-1] if closed else runs[1:]
    for i, (name, result) in enumerate(variants):
        key = (model, name)
        if not result.ok:
            failures.setdefault(key, []).append(f"{result.failure_class}: {result.failure_message}")
            continue
        if not (first.ok and last.ok):
            continue
        position = (i + 1) / (len(variants) + 1)
        pairs.setdefault(key, []).append({
            "throughput_ratio": result.throughput / at(first.throughput, last.throughput, position),
            "memory_ratio": result.peak_memory_bytes / at(first.peak_memory_bytes, last.peak_memory_bytes, position),
            "throughput": result.throughput, "peak_memory_bytes": result.peak_memory_bytes,
            "compile_s": result.compile_s, "estimate": result.memory_estimate, "closing_baseline": closed,
            "reserved_peak_bytes": result.telemetry.get("reserved_peak_bytes"),
        })
    baselines = [r for r in ((first, last) if closed else (first,)) if r.ok]
    for r in baselines:
        pairs.setdefault((model, "baseline"), []).append({
            "throughput": r.throughput, "peak_memory_bytes": r.peak_memory_bytes, "estimate": r.memory_estimate})
    if not baselines:
        failures.setdefault((model, "baseline"), []).append(f"{first.failure_class}: {first.failure_message}")


def from_run_log(path: Path) -> dict:
    """The table again from a ``knobs_TABLE.jsonl`` run log (a run stopped before it wrote
    its table): rounds paired as ``run_table`` pairs them; refused variants are not in a log."""
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rounds: dict[tuple[int, str], list[tuple[str, TrialResult]]] = {}
    heads: dict[str, dict] = {}
    for e in entries:
        rounds.setdefault((e["round"], e["model"]), []).append((e["variant"], TrialResult.from_dict(e["result"])))
        heads.setdefault(e["model"], {"workload": e["workload"], "variants": {}})["variants"].setdefault(
            e["variant"], e["config"])
    pairs: dict = {}
    failures: dict = {}
    for (_, model), runs in rounds.items():
        pair_round(model, runs, pairs, failures)
    rows = [_row(model, head["workload"], variant, config, None, pairs, failures)
            for model, head in heads.items() for variant, config in head["variants"].items()]
    table = path.stem.removeprefix("knobs_")
    beside = path.with_suffix(".json")  # the run's own table, for its machine, versions and date
    known = json.loads(beside.read_text()) if beside.exists() else {}
    return {**{k: known[k] for k in ("date", "commit", "hardware", "torch", "budget_s", "wall_s", "tiny_models")
               if k in known},
            "table": table, "from_run_log": path.name,
            "what": "each knob vs its model's fp32 baseline: paired probes, 95% t intervals on log ratios",
            "rows": rows}


def _row(model: str, workload: str, variant: str, config: dict, refused: str | None, pairs: dict,
         failures: dict) -> dict:
    got = pairs.get((model, variant), [])
    row = {"model": model, "workload": workload, "variant": variant, "config": config, "refused": refused,
           "failures": [f[:400] for f in failures.get((model, variant), [])], "runs": got}
    if variant != "baseline" and got:
        thr, mem = interval([p["throughput_ratio"] for p in got]), interval([p["memory_ratio"] for p in got])
        row["throughput_ratio"], row["memory_ratio"] = _plain(thr), _plain(mem)
        row["closing_baseline"] = all(p.get("closing_baseline", True) for p in got)
    return row


def _plain(found) -> dict | None:
    """An interval as JSON (an unbounded end, from one pair, as null)."""
    if found is None:
        return None
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in found.to_dict().items()}


def _versions() -> dict:
    import torch

    found = {"torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import torchao

        found["torchao"] = torchao.__version__
    except Exception as exc:  # noqa: BLE001 - absent or broken: say which
        found["torchao"] = f"unavailable: {type(exc).__name__}: {exc}"[:200]
    if torch.cuda.is_available():
        found["gpu"] = torch.cuda.get_device_name(0)
    return found


def show(doc: dict) -> None:
    where = (doc.get("hardware") or {}).get("gpus") or "no GPU"
    print(f"\n{doc['table']}: {where}, torch {(doc.get('torch') or {}).get('torch', '?')}")
    for row in doc["rows"]:
        name = f"{row['model']:11s} {row['variant']:60s}"
        if row["refused"]:
            print(f"{name} refused: {row['refused'][:90]}")
        elif row["variant"] == "baseline":
            thr = [r["throughput"] for r in row["runs"]]
            shown = f"{min(thr):,.1f}-{max(thr):,.1f} samples/s" if thr else _failed(row)
            print(f"{name} {shown}")
        elif row.get("throughput_ratio"):
            t, m = row["throughput_ratio"], row["memory_ratio"]
            span = f"({t['low']:.2f}-{t['high']:.2f})" if t["high"] is not None else "(one pair)"
            span += "" if row.get("closing_baseline", True) else " vs the opening baseline only"
            print(f"{name} {t['center']:.2f}x {span}  memory {m['center']:.2f}x")
        else:
            print(f"{name} {_failed(row)}")


def _failed(row: dict) -> str:
    """A row with no figure: failed (its first failure), or never run (the part's limit
    came before its round)."""
    return f"FAILED {row['failures'][:1]}" if row["failures"] else "not run (the limit came first)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", choices=sorted(TABLES))
    ap.add_argument("--from-run-log", metavar="JSONL", help="rebuild the table from a run log instead of running it")
    ap.add_argument("--out", required=True, help="folder for knobs_TABLE.json and .jsonl")
    ap.add_argument("--budget-s", type=float, default=240.0, help="start no round after this many seconds")
    ap.add_argument("--pairs", type=int, default=5, help="at most this many rounds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trial-timeout", type=float, default=180.0, help="limit for one run, seconds")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_run_log:
        doc = from_run_log(Path(args.from_run_log))
    else:
        doc = run_table(args.table, out, args.budget_s, args.pairs, args.seed, args.trial_timeout)
    (out / f"knobs_{args.table}.json").write_text(json.dumps(doc, indent=1) + "\n")
    show(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
