"""``advisor hardware``: this machine, and every knob's options as offered or refused."""

from __future__ import annotations

import argparse
import json
import sys

NAME = "hardware"
HELP = "Show what this machine can do, knob by knob, with the reason for each refusal."
EPILOG = """examples:
  advisor hardware           # the capability table, knob by knob, with reasons
  advisor hardware --json"""


def add_arguments(h: argparse.ArgumentParser) -> None:
    h.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from advisor.machine.hardware import detect, fingerprint
    from advisor.techniques.rules import capability_table

    hw = detect()
    rows = capability_table(hw)
    if args.json:
        print(json.dumps({"fingerprint": fingerprint(hw), "notes": list(hw.notes), "options": [
            {"knob": r.key, "value": r.value, "available": r.available, "reason": r.reason,
             "workloads": r.workloads.split(", ")} for r in rows]}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    gpus = hw.gpu_names() or "none"
    console.print(f"CPU: {hw.cpu.model}, {hw.cpu.cores} cores, flags: {' '.join(sorted(hw.cpu.flags)) or 'unknown'}")
    console.print(f"GPUs: {gpus}; driver {hw.driver_version or '-'}; torch {hw.torch_version}, CUDA {hw.cuda_version or '-'}, "
                  f"torchao {hw.torchao or 'not installed'}")
    console.print(f"Trials run on: {hw.device}")
    for note in hw.notes:
        console.print(f"note: {note}")
    table = Table("knob", "option", "for", "offered", "why not")
    for r in rows:
        for_ = "both" if r.workloads == "train, inference" else r.workloads
        table.add_row(r.key, json.dumps(r.value), for_, "yes" if r.available else "no", r.reason)
    console.print(table)
    return 0
