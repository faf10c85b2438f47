"""``advisor spaces [NAME]``: the shipped presets, or one filtered for this machine."""

from __future__ import annotations

import argparse
import json

NAME = "spaces"
HELP = "List the shipped search spaces, or show one filtered for this machine."
EPILOG = """examples:
  advisor spaces             # list the shipped presets
  advisor spaces default     # show one, filtered for this machine"""


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("name", nargs="?", help="a preset name or YAML path to show")


def run(args: argparse.Namespace) -> int:
    from advisor import search_spaces
    from advisor.search.space import filter_space, load_space

    if not args.name:
        for name in search_spaces.names():
            space = load_space(name)
            text = search_spaces.read(name) or ""
            first = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), "")
            print(f"{name:10s} {space.size():6d} configurations  {first}")
        return 0
    from advisor.machine.hardware import detect
    from advisor.outputs.summary import dropped_lines

    space = load_space(args.name)
    filtered = filter_space(space, detect())
    print(f"space {space.name}: {space.size()} configurations, {filtered.size()} on this machine")
    for knob in filtered.knobs:
        cond = f"   (when {', '.join(f'{k}={json.dumps(v)}' for k, v in knob.when)})" if knob.when else ""
        print(f"  {knob.name:24s} {json.dumps(list(knob.choices))}{cond}")
    for line in dropped_lines(filtered):
        print(f"  {line}")
    return 0
