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
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class Group:
    """One model's baseline and the knobs measured against it."""

    model: str  # a file of benchmarks/gpu/models/, without .py
    workload: str  # train or inference
    variants: tuple[dict, ...]
    baseline: tuple[tuple[str, object], ...] = ()  # changes to the model's BASELINE


def _bf16(**more) -> dict:
    return {"precision": "bf16", **more}


TABLES: dict[str, tuple[Group, ...]] = {
    "train": (
        Group("gpt2_small", "train", (
            {"precision": "tf32"}, _bf16(), {"precision": "fp16"}, {"fused_optimizer": True},
            _bf16(fused_optimizer=True), _bf16(sdpa_backend="math"), _bf16(sdpa_backend="flash"),
            _bf16(sdpa_backend="efficient"), _bf16(sdpa_backend="cudnn"), {"cudnn_benchmark": True},
            {"expandable_segments": True}, {"activation_checkpointing": True},
            _bf16(activation_checkpointing=True),
        )),
        Group("conv_net", "train", (
            {"channels_last": True}, _bf16(), _bf16(channels_last=True), {"cudnn_benchmark": True},
            _bf16(channels_last=True, cudnn_benchmark=True), {"activation_checkpointing": True},
        )),
        Group("wide_mlp", "train", (
            _bf16(), _bf16(compile=True), _bf16(compile=True, quantization="fp8_training", fp8_scaling="tensorwise"),
            _bf16(compile=True, quantization="fp8_training", fp8_scaling="rowwise"),
            {"quantization": "fp8_training", "fp8_scaling": "tensorwise", "compile": True},
        )),
    ),
    "compile": (
        Group("gpt2_small", "train", (
            {"compile": True}, {"compile": True, "compile_mode": "reduce-overhead"},
            {"compile": True, "compile_mode": "max-autotune-no-cudagraphs"},
            {"compile": True, "compile_mode": "max-autotune"}, _bf16(compile=True),
            _bf16(compile=True, compile_mode="reduce-overhead"), _bf16(compile=True, compile_optimizer=True),
        )),
    ),
    "inference": (
        Group("gpt2_small", "inference", (
            {"precision": "tf32"}, _bf16(), {"precision": "bf16_full"}, {"quantization": "int8_weight_only"},
            {"quantization": "int8_dynamic"}, {"precision": "bf16_full", "quantization": "int4_weight_only"},
            {"quantization": "fp8"}, {"quantization": "fp8", "fp8_scaling": "rowwise"},
            {"precision": "bf16_full", "pruning": "semi_structured_2_4"},
            {"precision": "bf16_full", "compile": True},
            {"precision": "bf16_full", "quantization": "int8_weight_only", "compile": True},
        ), baseline=(("batch_size", 32),)),
    ),
}


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

                first = run(base, "baseline")
                order = list(runnable)
                rng.shuffle(order)
                done = [(config, run(config, "variant")) for config, _ in order]
                last = run(base, "baseline")
                for i, (config, result) in enumerate(done):
                    key = (group.model, label(base, config))
                    if not result.ok:
                        failures.setdefault(key, []).append(f"{result.failure_class}: {result.failure_message}")
                        continue
                    if not (first.ok and last.ok):
                        continue
                    position = (i + 1) / (len(done) + 1)
                    pairs.setdefault(key, []).append({
                        "throughput_ratio": result.throughput / at(first.throughput, last.throughput, position),
                        "memory_ratio": result.peak_memory_bytes / at(first.peak_memory_bytes, last.peak_memory_bytes,
                                                                      position),
                        "throughput": result.throughput, "peak_memory_bytes": result.peak_memory_bytes,
                        "compile_s": result.compile_s, "estimate": result.memory_estimate,
                        "reserved_peak_bytes": result.telemetry.get("reserved_peak_bytes"),
                    })
                baselines = [r for r in (first, last) if r.ok]
                for r in baselines:
                    pairs.setdefault((group.model, "baseline"), []).append({
                        "throughput": r.throughput, "peak_memory_bytes": r.peak_memory_bytes,
                        "estimate": r.memory_estimate})
                if not baselines:
                    failures.setdefault((group.model, "baseline"), []).append(
                        f"{first.failure_class}: {first.failure_message}")
    except KeyboardInterrupt:  # stopped at its limit: the table of what was measured
        print("interrupted: the table holds the rounds that finished", flush=True)
    finally:
        executor.shutdown()

    rows = []
    for group, _, base, runnable, refused, _ in groups:
        for config, reason in [(base, None)] + [(c, None) for c, _ in runnable] + refused:
            key = (group.model, label(base, config))
            got = pairs.get(key, [])
            row = {"model": group.model, "workload": group.workload, "variant": key[1], "config": config.to_dict(),
                   "refused": reason, "failures": [f[:400] for f in failures.get(key, [])], "runs": got}
            if key[1] != "baseline" and got:
                thr, mem = interval([p["throughput_ratio"] for p in got]), interval([p["memory_ratio"] for p in got])
                row["throughput_ratio"], row["memory_ratio"] = _plain(thr), _plain(mem)
            rows.append(row)
    return {"table": name,
            "what": "each knob vs its model's fp32 baseline: paired probes, 95% t intervals on log ratios",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "commit": os.environ.get("ADVISOR_CHECK_COMMIT", ""), "hardware": fingerprint(hw),
            "torch": _versions(), "budget_s": budget_s, "wall_s": time.monotonic() - started,
            "tiny_models": os.environ.get("ADVISOR_GPU_CHECK_TINY") == "1", "rows": rows}


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
    print(f"\n{doc['table']}: {doc['hardware'].get('gpus') or 'no GPU'}, torch {doc['torch']['torch']}")
    for row in doc["rows"]:
        name = f"{row['model']:11s} {row['variant']:60s}"
        if row["refused"]:
            print(f"{name} refused: {row['refused'][:90]}")
        elif row["variant"] == "baseline":
            thr = [r["throughput"] for r in row["runs"]]
            shown = f"{min(thr):,.1f}-{max(thr):,.1f} samples/s" if thr else f"FAILED {row['failures'][:1]}"
            print(f"{name} {shown}")
        elif row.get("throughput_ratio"):
            t, m = row["throughput_ratio"], row["memory_ratio"]
            span = f"({t['low']:.2f}-{t['high']:.2f})" if t["high"] is not None else "(one pair)"
            print(f"{name} {t['center']:.2f}x {span}  memory {m['center']:.2f}x")
        else:
            print(f"{name} FAILED {row['failures'][:1]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", choices=sorted(TABLES))
    ap.add_argument("--out", required=True, help="folder for knobs_TABLE.json and .jsonl")
    ap.add_argument("--budget-s", type=float, default=240.0, help="start no round after this many seconds")
    ap.add_argument("--pairs", type=int, default=5, help="at most this many rounds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trial-timeout", type=float, default=180.0, help="limit for one run, seconds")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = run_table(args.table, out, args.budget_s, args.pairs, args.seed, args.trial_timeout)
    (out / f"knobs_{args.table}.json").write_text(json.dumps(doc, indent=1) + "\n")
    show(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
