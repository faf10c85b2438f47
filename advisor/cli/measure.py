"""``advisor measure model.py --config best.yaml``: an exported config measured again in
fresh trials, beside the stored figures."""

from __future__ import annotations

import argparse
import json
from typing import Any

from advisor.core.errors import StudyError

NAME = "measure"
HELP = "Measure an exported config again on this machine and compare with the stored figures."
EPILOG = """examples:
  advisor measure examples/digits_cnn.py --config best.yaml            # 3 fresh trials
  advisor measure model.py --config fast.yaml --repeats 5 --json"""


def add_arguments(m: argparse.ArgumentParser) -> None:
    m.add_argument("model", help="the model.py the config is for")
    m.add_argument("--config", required=True, help="a file written by advisor export (yaml or json)")
    m.add_argument("--repeats", type=int, default=3, help="fresh trials to run, one after another (default 3)")
    m.add_argument("--trial-timeout", type=float, default=600.0, help="limit for one trial, seconds (default 600)")
    m.add_argument("--ray-address", help="join this Ray cluster instead of starting a local one")
    m.add_argument("--json", action="store_true", help="print the comparison as JSON")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from advisor.core.units import first_line, fmt_bytes
    from advisor.outputs.remeasure import comparison_table, remeasure

    console = Console(stderr=args.json, highlight=False)
    if not console.is_terminal:
        console.width = 120

    def on_run(i: int, r: Any, wall: float) -> None:
        text = (f"{r.throughput:,.0f} samples/s, {fmt_bytes(r.peak_memory_bytes)}, accuracy {r.accuracy:.4f}"
                if r.ok else f"FAILED [{r.failure_class}] {first_line(r.failure_message, 200)}")
        console.print(f"run {i + 1}  {wall:5.1f} s  {text}", markup=False)

    if args.trial_timeout <= 0:
        raise StudyError(f"--trial-timeout must be a positive number of seconds, found {args.trial_timeout}")
    result = remeasure(args.model, args.config, args.repeats, args.ray_address, args.trial_timeout, on_run)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    source = result.document.get("source") or {}
    origin = f"trial {source.get('trial')} of study {source.get('study')!r}" if source.get("study") else "no source recorded"
    console.print(f"config    {args.config}: {origin} ({result.config.describe()})", markup=False)
    for note in result.notes:
        console.print(f"note      {note}", markup=False)
    console.print(comparison_table(result))
    return 0
